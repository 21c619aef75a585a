"""`apsft export-arms` on the suite's finished smoke store (README command 1: `cli_run`).

The `datasets` export is read back with `datasets.load_dataset`, and each row's token weights are
recomputed from its messages alone: rendered with the base model's chat template, tokenized, and
each token weighted by where its first character falls (before the thought: 0, in the thought:
0.5, from `</think>` on: 1), a rule written here, not the training loss's span code.
"""

from __future__ import annotations

import gzip
import json

import pytest

from apsft_dagster.cli import main
from apsft_dagster.core.arm_export import export_arms
from apsft_dagster.core.base_model import load_tokenizer
from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import ExportError
from apsft_dagster.core.layout import EVIDENCE_SEAL, SFT_MANIFEST, arm_file, arm_rows
from apsft_dagster.core.selection.arms import ARMS
from apsft_dagster.core.store import Store, dir_digests, sha256_file

THINK_OPEN, THINK_CLOSE, END = "<think>\n", "</think>", "<|im_end|>"


@pytest.fixture(scope="module")
def exported(cli_run, tmp_path_factory):
    """The smoke store, both formats exported twice (the first through the command line), and the tokenizer."""
    store = cli_run[1]
    config = load_config("smoke")
    tokenizer = load_tokenizer(config, store)
    root = tmp_path_factory.mktemp("export_arms")
    assert main(["export-arms", "--format", "messages", "--store", str(store.root),
                 "--out", str(root / "messages")]) == 0
    export_arms(store, config, "datasets", root / "datasets", tokenizer)
    for fmt in ("messages", "datasets"):
        export_arms(store, config, fmt, root / f"{fmt}-again", tokenizer)
    return store, root, tokenizer


def stored_rows(store: Store, arm: str) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress(store.get_bytes(arm_file(arm))).splitlines()]


def brute_force_weights(tokenizer, messages: list[dict]) -> tuple[list[int], list[float]]:
    """The record rendered from the messages, tokenized, each token weighted by its first character."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    text = text[:text.rindex(END) + len(END)]  # the template's newline after the turn is not trained on
    reply = text.index(messages[1]["content"], len(messages[0]["content"]))
    thought = text.index(THINK_OPEN, reply) + len(THINK_OPEN)
    boundary = text.rindex(THINK_CLOSE)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    weights = [0.0 if stop == 0 or start < thought else 0.5 if start < boundary else 1.0
               for start, stop in enc["offset_mapping"]]
    return enc["input_ids"], weights


def test_the_datasets_export_loads_and_its_weights_are_the_messages_own(exported, tmp_path):
    import datasets

    store, root, tokenizer = exported
    manifest = store.get_json(SFT_MANIFEST)
    assert datasets.get_dataset_config_names(str(root / "datasets")) == list(ARMS)
    for entry in manifest["arms"]:
        arm = entry["arm"]
        table = datasets.load_dataset(str(root / "datasets"), arm, split="train", cache_dir=str(tmp_path / "cache"))
        rows = stored_rows(store, arm)
        assert len(table) == len(rows) == entry["rows"] == store.get_parquet(arm_rows(arm)).height
        info = datasets.DatasetInfo.from_directory(str(root / "datasets" / arm))
        assert info.features == table.features and info.splits["train"].num_examples == len(rows)
        for got, row in zip(table, rows):
            assert got["messages"] == [
                {"role": "user", "content": row["prompt"]},
                {"role": "assistant",
                 "content": f"{THINK_OPEN}{row['thought']}{THINK_CLOSE}\n\nANSWER: {row['answer']}"}]
            assert (got["row"], got["task_id"], got["source_trace_id"]) == (row["row"], row["task_id"],
                                                                            row["source_trace_id"])
            ids, weights = brute_force_weights(tokenizer, got["messages"])
            assert got["input_ids"] == ids
            assert got["loss_weights"] == weights
            assert got["completion_mask"] == [int(w > 0) for w in weights]
            assert {0.0, 0.5, 1.0} == set(weights)


def test_the_messages_export_holds_the_same_rows_and_llama_factory_names_each_file(exported, tmp_path):
    import datasets

    store, root, _ = exported
    folder = root / "messages"
    factory = json.loads((folder / "dataset_info.json").read_text())
    assert set(factory) == set(ARMS)
    for arm in ARMS:
        assert factory[arm]["file_name"] == f"{arm}.jsonl" and factory[arm]["formatting"] == "sharegpt"
        lines = [json.loads(line) for line in (folder / f"{arm}.jsonl").read_text().splitlines()]
        shards = datasets.load_dataset("parquet", data_files=str(root / "datasets" / arm / "*.parquet"),
                                       split="train", cache_dir=str(tmp_path / "cache"))
        assert len(lines) == len(stored_rows(store, arm))
        assert lines == list(shards)
    document = json.loads((folder / "export.json").read_text())
    assert document["files"] == {name: sha256_file(folder / name) for name in document["files"]}
    assert document["evidence_seal_sha256"] == store.verify(EVIDENCE_SEAL)
    assert document["config_digest"] == load_config("smoke").sealed_digest


def test_the_dataset_card_names_each_arm_its_counts_the_seal_and_the_config(exported):
    store, root, _ = exported
    card = (root / "datasets" / "README.md").read_text()
    assert store.verify(EVIDENCE_SEAL) in card and load_config("smoke").sealed_digest in card
    for entry in store.get_json(SFT_MANIFEST)["arms"]:
        line = next(line for line in card.splitlines() if line.startswith(f"| `{entry['arm']}` |"))
        assert f"| {entry['rows']} | {entry['tasks']} | {entry['cells']} |" in line and entry["sha256"] in line


def test_a_second_export_writes_the_same_bytes(exported):
    _, root, _ = exported
    for fmt in ("messages", "datasets"):
        first, again = dir_digests(root / fmt), dir_digests(root / f"{fmt}-again")
        assert first == again and len(first) >= len(ARMS) + 2


def test_bad_inputs_are_refused_by_name_and_nothing_is_written(exported, tmp_path, capsys):
    store, _, tokenizer = exported
    config = load_config("smoke")
    out = tmp_path / "out"
    with pytest.raises(ExportError, match="no sealed arms yet"):
        export_arms(Store(tmp_path / "empty-store"), config, "messages", out, tokenizer)
    with pytest.raises(ExportError, match="--format 'parquet': unknown"):
        export_arms(store, config, "parquet", out, tokenizer)
    assert not out.exists()
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match=f"--out {out}: exists and is not an empty folder"):
        export_arms(store, config, "datasets", out, tokenizer)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert main(["export-arms", "--format", "csv", "--store", str(store.root), "--out", str(tmp_path / "x")]) == 2
    assert "--format 'csv': unknown; choose one of messages, datasets" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_chat_template_that_cannot_render_the_training_record_is_refused(exported):
    import copy

    from apsft_dagster.core.arm_export.records import chat_messages
    from apsft_dagster.core.text_protocol import for_config

    tokenizer = copy.deepcopy(exported[2])
    protocol = for_config(load_config("smoke"))
    assert chat_messages(tokenizer, protocol, "What is 2 + 3?", "2 + 3 = 5\n", "5", "x")[1]["content"] == (
        "<think>\n2 + 3 = 5\n</think>\n\nANSWER: 5")
    tokenizer.chat_template = "<|im_start|>system\nBe brief.<|im_end|>\n" + tokenizer.chat_template
    with pytest.raises(ExportError, match="sft_arms/a.jsonl.gz row 3: the base model's chat template writes"):
        chat_messages(tokenizer, protocol, "What is 2 + 3?", "2 + 3 = 5\n", "5", "sft_arms/a.jsonl.gz row 3")
