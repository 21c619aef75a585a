"""Every file a user hands the platform, fuzzed (tests/fuzzing.py): the inherited bank (index,
receipts, shards), an RL run folder, a loss-mask JSON-lines export, a hand-made amendment. Each
reader accepts a mutated input that is still valid, or refuses it with the project's error naming
the file, and writes nothing. Bounded here (60 inputs per reader, fixed seed); benchmarks/fuzz.py
runs the same longer."""

import io
import json
import re
import shutil
import tempfile
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apsft_dagster.core.amendments import classified, read_log, record_amendment
from apsft_dagster.core.bank import InheritedBank, export_bank
from apsft_dagster.core.errors import ApsftError
from apsft_dagster.core.harvest import TRACE_SCHEMA
from apsft_dagster.core.layout import AMENDMENT_LOG, TRACE_BANK, shard_file
from apsft_dagster.core.loss_mask.build import build
from apsft_dagster.core.loss_mask.dataset import dataset_lines
from apsft_dagster.core.loss_mask.parallel import census_file
from apsft_dagster.core.run_report.ingest import load_run
from apsft_dagster.core.store import RECEIPT_SUFFIX, Store, sha256_bytes
from fuzzing import fuzz_settings, judge, mutated_bytes, mutated_document

TASKS = ["caravan-L1-000", "caravan-L1-001", "runeward-L2-000"]
RL_RUN = Path(__file__).parent / "fixtures" / "rl_run"
VALUES = {pl.String: "s", pl.Int64: 1, pl.Boolean: False, pl.List(pl.Int64): [1, 2]}


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _shard(task_id: str, schema: dict = TRACE_SCHEMA) -> pl.DataFrame:
    row = {k: [task_id if k == "task_id" else VALUES[v]] for k, v in schema.items()}
    return pl.DataFrame(row, schema=schema)


def _exported_bank(root: Path) -> tuple[Path, str]:
    source = Store(root / "source")
    for task_id in TASKS:
        source.put_parquet(shard_file(TRACE_BANK, task_id), _shard(task_id))
    return root / "bank" / "index.json", export_bank(source, TRACE_BANK, TASKS, root / "bank")


def _forged_shard(draw, task_id: str) -> bytes:
    """A readable Parquet file that is not this bank's shard: a column gone or retyped, another task's rows."""
    kind = draw(st.sampled_from(["column_gone", "column_retyped", "other_task"]))
    schema = dict(TRACE_SCHEMA)
    if kind == "column_gone":
        schema.pop(draw(st.sampled_from(sorted(schema))))
    elif kind == "column_retyped":
        schema[draw(st.sampled_from(sorted(k for k, v in schema.items() if v == pl.Int64)))] = pl.String
    frame = _shard("other-L1-000" if kind == "other_task" else task_id, schema)
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    return buffer.getvalue()


def _mutate_bank(draw, index: Path, digest: str) -> tuple[str, bool]:
    """Mutate one file of the exported bank: (the index digest a user would then have recorded,
    whether the bank must now be refused: a shard changed or forged, or a shard removed)."""
    bank = index.parent
    target = draw(st.sampled_from(["index", "shard", "receipt", "forged"]))
    task_id = draw(st.sampled_from(TASKS))
    shard = bank / "shards" / f"{task_id}.parquet"
    receipt = shard.with_name(shard.name + RECEIPT_SUFFIX)
    if target == "forged":  # a consistent forgery: shard, receipt and index all agree on the new bytes
        data = _forged_shard(draw, task_id)
        shard.write_bytes(data)
        receipt.write_text(json.dumps({"sha256": sha256_bytes(data)}))
        doc = json.loads(index.read_bytes())
        doc["tasks"][task_id]["sha256"] = sha256_bytes(data)
        index.write_bytes(json.dumps(doc).encode())
        return sha256_bytes(index.read_bytes()), True
    path = {"index": index, "shard": shard, "receipt": receipt}[target]
    how = draw(st.sampled_from(["bytes", "document", "remove"] if path.suffix == ".json" else ["bytes", "remove"]))
    old = path.read_bytes()
    if how == "remove":
        path.unlink()
    else:
        path.write_bytes(draw(mutated_bytes(old) if how == "bytes" else mutated_document(json.loads(old))))
    changed = not path.exists() or path.read_bytes() != old
    recorded = target == "index" and path.exists() and draw(st.booleans())  # most users record the new index
    must_refuse = changed and (target == "shard" or (target == "index" and not recorded))
    return (sha256_bytes(index.read_bytes()) if recorded else digest), must_refuse


@fuzz_settings()
@given(data=st.data())
def test_an_inherited_bank_is_imported_whole_or_not_at_all(data):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        index, digest = _exported_bank(root)
        recorded, must_refuse = _mutate_bank(data.draw, index, digest)
        target = Store(root / "target")
        exported = _files(root / "bank")

        def load():
            bank = InheritedBank(index, recorded, TRACE_SCHEMA)
            for task_id in bank.tasks:
                bank.import_into(target, TRACE_BANK, task_id)

        if judge("inherited bank", load, (ApsftError,), [str(root / "bank")]):
            assert not must_refuse, "a changed, forged or missing shard (or an unrecorded index) was imported"
            for task_id in json.loads(index.read_bytes())["tasks"]:  # accepted: every shard imported as exported
                name = shard_file(TRACE_BANK, task_id)
                assert target.get_bytes(name) == exported[f"shards/{task_id}.parquet"]
        else:
            assert not (root / "target").exists()
        assert _files(root / "bank") == exported  # the reader never writes into the bank


@fuzz_settings()
@given(data=st.data())
def test_an_rl_run_folder_is_read_whole_or_refused_by_file(data):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "run"
        shutil.copytree(RL_RUN, folder)
        name = data.draw(st.sampled_from(sorted(p.name for p in folder.iterdir() if p.name != "README.md")))
        path = folder / name
        how = data.draw(st.sampled_from(["bytes", "document", "remove"] if name.endswith(".json")
                                        else ["bytes", "remove"]))
        if how == "remove":
            path.unlink()
        else:
            old = path.read_bytes()
            path.write_bytes(data.draw(mutated_bytes(old) if how == "bytes" else mutated_document(json.loads(old))))
        before = _files(Path(tmp))
        accepted = judge("RL run folder", lambda: load_run(folder), (ApsftError,), [str(path), str(folder)])
        required = name in ("eval_summary.json", "training_config.toml")  # the section files are optional
        assert not (accepted and how == "remove" and required), f"{name} missing, accepted"
        assert _files(Path(tmp)) == before


@fuzz_settings()
@given(data=st.data())
def test_a_loss_mask_export_is_counted_or_refused_by_line(data):
    lines = list(dataset_lines(12, seed=3))
    i = data.draw(st.integers(0, len(lines) - 1))
    how = data.draw(st.sampled_from(["bytes", "document"]))
    line = lines[i].rstrip(b"\n")
    lines[i] = data.draw(mutated_bytes(line) if how == "bytes" else mutated_document(json.loads(line))) + b"\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "export.jsonl"
        path.write_bytes(b"".join(lines))
        counted = {}

        def count():
            counted.update(census_file(path))

        if judge("loss-mask export", count, (ApsftError,), [f"{path} line "]):
            with open(path, "rb") as rows:  # what the census accepted, the build masks (same counts)
                report = build(rows, io.BytesIO(), io.BytesIO(), expected_reasons=counted["total"]["reasons"])
            assert report["rows"] == counted["total"]["rows"]
        assert sorted(p.name for p in Path(tmp).iterdir()) == ["export.jsonl"]


@fuzz_settings()
@given(data=st.data())
def test_a_hand_made_amendment_is_read_or_refused_by_line_and_field(data):
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "store")
        record_amendment(store, "the first registered change", "2026-11-01")
        record_amendment(store, "a budget for the matrix", "2026-11-02", budget_device_hours=2.0)
        lines = store.get_bytes(AMENDMENT_LOG).splitlines(keepends=True)
        i = data.draw(st.integers(0, len(lines) - 1))
        how = data.draw(st.sampled_from(["bytes", "document", "document", "drop", "stale_receipt", "reworded"]))
        if how == "drop":
            del lines[i]
        elif how == "reworded":  # a hand edit that keeps the record's shape: only the chain can tell
            record = json.loads(lines[i])
            record["text"] = data.draw(st.text(min_size=1, max_size=20).filter(lambda t: t != record["text"]))
            lines[i] = json.dumps(record, sort_keys=True, ensure_ascii=False).encode() + b"\n"
        elif how not in ("stale_receipt", "reworded"):
            old = lines[i].rstrip(b"\n")
            lines[i] = data.draw(mutated_bytes(old) if how == "bytes" else mutated_document(json.loads(old))) + b"\n"
        original = store.get_bytes(AMENDMENT_LOG).splitlines(keepends=True)
        chain_broken = how == "drop" and i < len(original) - 1 or how not in ("drop", "stale_receipt") and \
            i < len(original) - 1 and lines[i] != original[i]
        body = b"".join(lines)
        if how == "stale_receipt":
            store.path(AMENDMENT_LOG).write_bytes(body + b"\n")  # edited by hand, receipt not redone
        else:
            store.put_bytes(AMENDMENT_LOG, body)  # edited by hand, with its receipt redone
        before = _files(Path(tmp))
        accepted = judge("amendment log", lambda: classified(store) and read_log(store), (ApsftError,),
                         [str(store.path(AMENDMENT_LOG))])
        assert not (accepted and (chain_broken or how == "stale_receipt")), "an edited record was accepted"
        assert _files(Path(tmp)) == before


ROW = json.loads(next(iter(dataset_lines(1, seed=3))))
BIG = json.dumps({**ROW, "messages": [*ROW["messages"], {"role": "user", "content": "x" * 50_000_000}]}).encode()


@pytest.mark.parametrize("line, refusal", [
    (json.dumps(ROW).encode()[:-40], "not valid JSON"),  # a truncated row
    (json.dumps(ROW).encode().replace(b'"user"', b'"us\xffer"', 1), "not valid UTF-8"),
    (b'{"row_id": "a", "row_id": "b"}', "key 'row_id' appears twice"),
    (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    (json.dumps({**ROW, "messages": "hello"}).encode(), "field 'messages' must be a list"),
    (json.dumps({**ROW, "row_id": 7}).encode(), "field 'row_id' must be a string"),
    (json.dumps({**ROW, "harness": ["terminus2"]}).encode(), "field 'harness' must be one of"),
    (BIG, None),  # a 50 MB row is a row: counted, in one pass
], ids=["truncated", "not-utf8", "key-twice", "deep", "messages-not-list", "row-id-not-str", "bad-harness",
        "50mb"])  # short ids: pytest-xdist sends each id between processes (the 50 MB row's was the row)
def test_the_named_bad_rows_are_refused_by_line_and_a_50_mb_row_is_counted(tmp_path, line, refusal):
    path = tmp_path / "export.jsonl"
    path.write_bytes(next(iter(dataset_lines(1, seed=3))) + line + b"\n")
    if refusal is None:
        assert census_file(path)["total"]["rows"] == 2
        return
    with pytest.raises(ApsftError, match=f"export.jsonl line 2: .*{re.escape(refusal)}"):
        census_file(path)
