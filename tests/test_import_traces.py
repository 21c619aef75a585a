"""`apsft import-traces`: the smoke run's own traces, written out as a harness writes them (JSONL and Parquet),
come back as the harvest's rows on every field the file carries, are kept by the trace_bank stage's keyer and
pass the seal's key checks; bad input is refused by file, row and field with nothing written."""

import hashlib
import json
import shutil

import polars as pl
import pytest

from apsft_dagster.cli import main
from apsft_dagster.core.bank import write_index
from apsft_dagster.core.bank_key_check import Keyer, sealed_keys
from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import StoreOwnerError, TraceImportError
from apsft_dagster.core.layout import TASK_CATALOG, TRACE_BANK, key_file, shard_file
from apsft_dagster.core.loops import find_loop
from apsft_dagster.core.protocol import format_prompt
from apsft_dagster.core.store import Store
from apsft_dagster.core.trace_import import split_completion
from apsft_dagster.core.trace_import_store import import_traces
from conftest import variant_config

ANSWER_TAIL = "</think>\n\nANSWER: 7<|im_end|>"  # a harness that did not stop at the close: the answer is dropped
CARRIED = ("trace_id", "task_id", "family", "level", "batch", "sample_index", "thought", "n_record_tokens", "closed",
           "loop", "loop_period", "eligible", "task_excluded")
NULL = ("seed", "continuation_seed", "continued")


def _new_store(smoke: Store, root) -> Store:
    """A store after `apsft run --to tasks_and_model_job`: the smoke run's catalog, base model and owner record."""
    root.mkdir()
    for name in ("task_catalog.parquet", "base_model.json", "store.json", "base_model"):
        (shutil.copytree if smoke.path(name).is_dir() else shutil.copy)(smoke.path(name), root / name)
        shutil.copy(smoke.receipt_path(name), root / f"{name}.receipt.json")
    return Store(root)


def _files(store: Store) -> dict[str, bytes]:
    return {p.relative_to(store.root).as_posix(): p.read_bytes() for p in sorted(store.root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def smoke(cli_run):
    _, store, _ = cli_run
    bank = pl.concat([pl.read_parquet(p) for p in store.local_files("trace_bank/shards/*.parquet")]).sort("trace_id")
    return store, bank, store.get_parquet(TASK_CATALOG)


def test_imported_traces_are_the_harvests_rows(smoke, tmp_path):
    from transformers import AutoTokenizer

    store, harvested, catalog = smoke
    new, config = _new_store(store, tmp_path / "store"), load_config("smoke")
    tasks = sorted(harvested["task_id"].unique())
    first, second = harvested.filter(pl.col("task_id").is_in(tasks[:9])), harvested.filter(pl.col("task_id").is_in(
        tasks[9:]))
    assert not first["closed"].all() or not second["closed"].all()  # the smoke bank's one open thought is imported
    with open(tmp_path / "vllm.jsonl", "w") as out:  # task ids; completions running on past the close
        for r in first.iter_rows(named=True):
            out.write(json.dumps({"task_id": r["task_id"], "completion": r["thought"] + ANSWER_TAIL * r["closed"]})
                      + "\n")
    prompts = dict(catalog.select("task_id", "prompt").iter_rows())
    pl.DataFrame({  # a harness's Parquet: prompts (raw or rendered), `text`, vLLM's finish reasons
        "prompt": [prompts[t] if i % 2 else format_prompt(prompts[t]) for i, t in enumerate(second["task_id"])],
        "text": [t + "</think>" * c for t, c in zip(second["thought"], second["closed"])],
        "finish_reason": ["stop" if c else "length" for c in second["closed"]],
    }).write_parquet(tmp_path / "harness.parquet")
    done = [import_traces(tmp_path / name, config, new, str(new.root)) for name in ("vllm.jsonl", "harness.parquet")]
    assert [d["tasks"] for d in done] == [9, 9] and done[1]["to_harvest"] == []
    imported = pl.concat([new.get_parquet(shard_file(TRACE_BANK, t)) for t in tasks]).sort("trace_id")

    for column in CARRIED:
        assert imported[column].to_list() == harvested[column].to_list(), column
    tokenizer = AutoTokenizer.from_pretrained(store.path("base_model"))
    close = tokenizer.convert_tokens_to_ids("</think>")
    for r, h in zip(imported.iter_rows(named=True), harvested.iter_rows(named=True)):  # tokenized here, independently
        ids = tokenizer(h["thought"], add_special_tokens=False)["input_ids"] + [close] * h["closed"]
        assert r["token_ids"] == ids and r["n_tokens"] == len(ids) and r["n_thought_tokens"] == len(ids) - h["closed"]
        assert r["token_sha256"] == hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()
        assert r["loop"] == (find_loop(ids) is not None)
        assert all(r[c] is None for c in NULL)
        open_in_jsonl = not h["closed"] and r["task_id"] in tasks[:9]
        assert r["finish_reason"] == (None if open_in_jsonl else h["finish_reason"]), r["trace_id"]
    assert (imported["token_ids"] != harvested["token_ids"]).sum() > 0  # sampled ids are not always the canonical ones

    keys = [json.loads(new.get_bytes(key_file(TRACE_BANK, t))) for t in tasks]
    first_file = hashlib.sha256((tmp_path / "vllm.jsonl").read_bytes()).hexdigest()
    assert keys[0]["settings"]["imported"]["file_sha256"] == first_file
    assert set(keys[0]["settings"]["imported"]["missing"]) == {*NULL, *(["finish_reason"] if
                                                                          not first["closed"].all() else [])}
    assert set(keys[0]["settings"]["imported"]["recomputed"]) == {"token_ids", "token_sha256"}
    assert keys[0]["made_by"]["rows"][f"{tasks[0]}/main/000"] == "line 1"
    keyer, train = Keyer(new, config, TRACE_BANK), catalog.filter(pl.col("split") == "train")
    assert {keyer.decide(t)[0] for t in train.iter_rows(named=True)} == {"keep"}  # the trace_bank stage keeps them
    write_index(new, TRACE_BANK, {t: new.verify(shard_file(TRACE_BANK, t)) for t in tasks})
    index = json.loads(new.get_bytes(f"{TRACE_BANK}/index.json"))["tasks"]
    problems, listed = sealed_keys(new, config, TRACE_BANK, index)
    assert problems == [] and len(listed["settings"]) == 2 and listed["shards"] == 18  # one settings group a file
    again = import_traces(tmp_path / "vllm.jsonl", config, new, str(new.root))  # the same file again: kept
    assert again["kept"] == tasks[:9]

    def judged(edit) -> set:  # the decisions of a run whose profile differs by `edit`
        keyer = Keyer(new, load_config(path=variant_config(tmp_path, edit)), TRACE_BANK)
        return {(v, tuple(c)) for v, c in (keyer.decide(t) for t in train.iter_rows(named=True))}

    assert judged(lambda raw: raw["harvest"]["sampling"].update(temperature=0.7)) == {("keep", ())}  # sampled elsewhere
    assert judged(lambda raw: raw["harvest"].update(record_limit=600)) == {
        ("refuse", (("harvest.record_limit", 640, 600),))}  # a rule that judged the traces


def _refused(store: Store, path, text: str, *expected: str, config=None) -> None:
    path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    before = _files(store)
    with pytest.raises(TraceImportError) as caught:
        import_traces(path, config or load_config("smoke"), store, str(store.root))
    for part in expected:
        assert part in str(caught.value), (part, str(caught.value))
    assert _files(store) == before


def test_bad_input_is_refused_by_row_and_field_with_nothing_written(smoke, tmp_path):
    store, harvested, catalog = smoke
    new, f = _new_store(store, tmp_path / "store"), tmp_path / "traces.jsonl"
    task = harvested.filter(pl.col("task_id") == "caravan-L1-000")
    good = [json.dumps({"task_id": "caravan-L1-000", "completion": t + "</think>"}) for t in task["thought"]]
    sealed = catalog.filter(pl.col("split") == "held_family").row(0, named=True)
    cases = {
        "unknown task": (good[0] + '\n{"task_id": "caravan-L9-000", "completion": "x"}\n',
                         [f"{f}: line 2: field 'task_id': unknown task 'caravan-L9-000'"]),
        "unknown prompt": ('{"prompt": "What is 2 + 3?", "output": "5</think>"}\n', [f"{f}: line 1: field 'prompt'"]),
        "sealed task": (json.dumps({"prompt": sealed["prompt"], "completion": "x</think>"}) + "\n" +
                        json.dumps({"task_id": "core_iid-caravan-L1-000", "completion": "x</think>"}),
                        [f"{f}: line 1: task {sealed['task_id']} is in the sealed split held_family",
                         f"{f}: line 2: task core_iid-caravan-L1-000 is in the sealed split core_iid"]),
        "no completion": ('{"task_id": "caravan-L1-000", "completion": null}\n{"task_id": "caravan-L1-000"}',
                          [f"{f}: line 1: no completion", f"{f}: line 2: no completion"]),
        "two completions": ('{"task_id": "caravan-L1-000", "text": "a", "output": "b"}',
                            [f"{f}: line 1: fields 'text' and 'output' both given"]),
        "bad finish": ('{"task_id": "caravan-L1-000", "text": "a", "finish_reason": "abort"}',
                       [f"{f}: line 1: field 'finish_reason': 'abort'"]),
        "bad JSON": (good[0] + '\n{"task_id": "caravan-L1-000", "completion": \n[1]\n',
                     [f"{f}: line 2: not valid JSON", f"{f}: line 3: not a JSON object"]),
        "not UTF-8": (b'{"task_id": "caravan-L1-000", "completion": "\xff"}\n', [f"{f}: line 1: not valid UTF-8"]),
        "bad Parquet": (b"PAR1 not really", [f"{f}: not a readable Parquet file"]),
        "no close anywhere": ('{"task_id": "caravan-L1-000", "completion": "a thought, never closed"}',
                              [f"{f}: no completion closes its thought ('</think>')", "skip_special_tokens=False"]),
        "beyond the allowance": ("\n".join(good + good[:1]),  # the main batch of 8 already holds 8 eligible
                                 [f"{f}: line 9: task caravan-L1-000: beyond the harvest's allowance",
                                  "fewer than 2 are"]),
    }
    for name, (text, expected) in cases.items():
        _refused(new, f, text, *expected)
    with pytest.raises(TraceImportError, match="cannot be read"):
        import_traces(tmp_path / "absent.jsonl", load_config("smoke"), new, str(new.root))

    new.put_json("store.json", {"profile": "full", "sealed_profile": "full"})  # a store of another profile
    before = _files(new)
    with pytest.raises(StoreOwnerError, match="belongs to profile full"):
        import_traces(f, load_config("smoke"), new, str(new.root))
    assert _files(new) == before
    new.put_json("store.json", {"profile": "smoke", "sealed_profile": "smoke"})
    f.write_text("\n".join(good))
    import_traces(f, load_config("smoke"), new, str(new.root))  # a shard of caravan-L1-000 now exists
    _refused(new, tmp_path / "other.jsonl", "\n".join(good[::-1]), "caravan-L1-000 already has a trace shard")
    new.put_json("evidence_seal.json", {})
    _refused(new, tmp_path / "late.jsonl", good[1], "evidence is sealed")


def test_a_loop_and_an_open_thought_are_judged_as_the_harvest_judges_them(smoke, tmp_path, capsys):
    """Hand-made completions: a thought cut at the sampler's length in an exact loop is a loop, not eligible; a
    thought the model left open at its end of turn is recorded as never closed (finish end_of_turn), as the
    harvest records one; with too few eligible, the task is excluded, all its rows say so."""
    store, harvested, _ = smoke
    new = _new_store(store, tmp_path / "store")
    thought = harvested.filter(pl.col("task_id") == "runeward-L2-000")["thought"][0]
    rows = [{"completion": thought + "</think>"}, {"completion": "figs 1 + 2 = 3.\n" * 40, "finish_reason": "length"},
            {"completion": "figs 1 + 2 <|im_end|> = 3</think>"}]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"task_id": "runeward-L2-000", **r}) + "\n" for r in rows))
    command = ["import-traces", str(tmp_path / "t.jsonl"), "--profile", "smoke", "--store", str(new.root)]
    assert main(command) == 0
    said = capsys.readouterr().out
    assert "imported 1 tasks: 3 traces, 1 eligible, 1 tasks excluded: runeward-L2-000" in said
    assert "the harvest makes the other 17 train tasks' shards" in said
    shard = new.get_parquet(shard_file(TRACE_BANK, "runeward-L2-000"))
    assert shard["closed"].to_list() == [True, False, False]
    assert shard["loop"].to_list() == [False, True, False] and shard["loop_period"][1] > 0
    assert shard["eligible"].to_list() == [True, False, False] and shard["task_excluded"].all()
    assert shard["finish_reason"].to_list() == ["close", "length", "end_of_turn"]
    assert shard["thought"][2] == "figs 1 + 2 <|im_end|>"  # the harvest's open thought holds its end of turn
    assert split_completion("a</x> b", close="</x>", end="<e>") == ("a", "</x>")
    assert split_completion("a<e> b</x>", close="</x>", end="<e>") == ("a", "<e>")
    assert split_completion("a b") == ("a b", "")
    (tmp_path / "t.jsonl").write_text('{"task_id": "runeward-L2-000"}\n')
    assert main(command) == 2 and f"{tmp_path / 't.jsonl'}: line 1: no completion" in capsys.readouterr().err
