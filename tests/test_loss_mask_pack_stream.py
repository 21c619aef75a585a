"""The streaming pack against a brute-force recomputation: every row encoded alone, the window order and
first fit redone here by hand, the packs rebuilt and compared; byte-identical reruns and workers; the
tokenizer digest and a registered template."""

import json
import random
from pathlib import Path

import pytest

from apsft_dagster.core.loss_mask import LossMaskError
from apsft_dagster.core.loss_mask.dataset import planted_rows
from apsft_dagster.core.loss_mask.pack import pack_rows, pack_to_folder
from apsft_dagster.core.loss_mask.pack_inputs import registered_template, tokenizer_sha256
from apsft_dagster.core.loss_mask.spans import TEMPLATE_FILE, encode_row

PACK, WINDOW, SEED = 640, 7, 5


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from tiny import tiny_tokenizer

    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def rows():
    return [row for row, _ in planted_rows(60, seed=8)]


def _brute_force(rows: list, tokenizer, max_open: int = 64) -> list[dict]:
    """The packs as the rule says, recomputed one plain step at a time."""
    template = TEMPLATE_FILE.read_text()
    encoded = [encode_row(r, tokenizer, template) for r in rows]
    order = []
    for w in range(0, len(rows), WINDOW):
        positions = list(range(min(WINDOW, len(rows) - w)))
        random.Random(f"apsft-pack:{SEED}:{w // WINDOW}").shuffle(positions)
        order += [w + p for p in positions]
    keep = [i for i in order if len(encoded[i].input_ids) <= PACK and any(encoded[i].loss_mask)]
    open_packs, closed = [], []  # each: [row indices]; closed in the order they close
    for i in keep:
        n = len(encoded[i].input_ids)
        fits = [p for p in open_packs if PACK - sum(len(encoded[j].input_ids) for j in p) >= n]
        if fits:
            fits[0].append(i)
            pack = fits[0]
        else:
            if len(open_packs) == max_open:
                closed.append(open_packs.pop(0))
            pack = [i]
            open_packs.append(pack)
        if sum(len(encoded[j].input_ids) for j in pack) == PACK:
            open_packs.remove(pack)
            closed.append(pack)
    packs = []
    for pid, members in enumerate(closed + open_packs):
        ids = [t for j in members for t in encoded[j].input_ids]
        mask = [t for j in members for t in encoded[j].loss_mask]
        lens = [len(encoded[j].input_ids) for j in members]
        pad = PACK - len(ids)
        packs.append({"pack_id": pid, "input_ids": ids + [tokenizer.pad_token_id] * pad, "loss_mask": mask + [0] * pad,
                      "position_ids": [p for n in [*lens, pad] for p in range(n)],
                      "row_ids": [rows[j]["row_id"] for j in members], "seq_lens": lens})
    return packs


def test_the_stream_packs_exactly_what_the_rule_recomputed_by_hand_gives(tokenizer, rows):
    lines = [json.dumps(r).encode() + b"\n" for r in rows]
    frames, report = pack_rows(lines, tokenizer, pack_length=PACK, shards=3, seed=SEED, window=WINDOW)
    expected = _brute_force(rows, tokenizer)
    assert report["packs"] == len(expected) > 3 and report["rows_over_limit"] > 0  # some rows are over the limit
    for shard, frame in enumerate(frames):
        assert frame.to_dicts() == [p for p in expected if p["pack_id"] % 3 == shard], shard
    assert report["rows_packed"] == sum(len(p["row_ids"]) for p in expected)
    assert report["tokens"] == sum(sum(p["seq_lens"]) for p in expected)
    assert report["trainable_tokens"] == sum(sum(p["loss_mask"]) for p in expected)


def test_reruns_and_two_workers_write_the_same_bytes(tokenizer, rows, tmp_path):
    lines = [json.dumps(r).encode() + b"\n" for r in rows]
    reports, files = [], []
    for name, workers in (("a", 1), ("b", 1), ("c", 2)):
        folder = tmp_path / name
        folder.mkdir()
        reports.append(pack_to_folder(lines, tokenizer, folder, pack_length=PACK, shards=2, seed=SEED, window=WINDOW,
                                      workers=workers))
        files.append({p.name: p.read_bytes() for p in sorted(folder.iterdir())})
    assert reports[0] == reports[1] == reports[2]
    assert files[0] == files[1] == files[2]
    assert sorted(files[0]) == ["dropped.jsonl", "shard-00000-of-00002.parquet", "shard-00001-of-00002.parquet"]


def test_the_tokenizer_digest_covers_the_tokenizer_files_only(tokenizer, tmp_path):
    import hashlib

    folder = Path(tokenizer.name_or_path)
    names = sorted(p.name for p in folder.iterdir() if p.name in ("tokenizer.json", "tokenizer_config.json",
                                                                 "special_tokens_map.json"))
    by_hand = hashlib.sha256(json.dumps({n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in names},
                                        sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert names and tokenizer_sha256(folder) == by_hand
    copy = tmp_path / "tok"
    copy.mkdir()
    for n in names:
        (copy / n).write_bytes((folder / n).read_bytes())
    (copy / "model.safetensors").write_bytes(b"weights")  # not a tokenizer file
    assert tokenizer_sha256(copy) == by_hand
    (copy / "chat_template.jinja").write_text("{{ messages }}")
    assert tokenizer_sha256(copy) != by_hand
    with pytest.raises(LossMaskError, match="no tokenizer.json or tokenizer_config.json"):
        tokenizer_sha256(tmp_path)


def test_a_registered_template_is_read_only_while_its_digest_holds(tmp_path):
    import hashlib

    path = tmp_path / "t.jinja"
    path.write_text("{{ x }}")
    record = {"name": "d", "chat_template": {"path": str(path), "sha256": hashlib.sha256(b"{{ x }}").hexdigest()}}
    assert registered_template(record) == "{{ x }}" and registered_template({"name": "d"}) is None
    path.write_text("{{ y }}")
    with pytest.raises(LossMaskError, match=r"dataset d: chat template .* changed since registration"):
        registered_template(record)
