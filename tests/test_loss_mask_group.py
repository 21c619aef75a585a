"""The loss-mask group as Dagster runs it: a registered dataset version through census, build,
verify, pack and the comparison, every gate a blocking check, the SQL audits, byte-identical
reruns, a changed file refused by name, and `apsft loss-mask demo` in a fresh process."""

import json
import os
import shutil
import subprocess
import sys
from collections import Counter

import pytest

from apsft_dagster.core.layout import BASE_MODEL_DIR, BASE_MODEL_REPORT
from apsft_dagster.core.loss_mask.dataset import dataset_lines, planted_rows
from apsft_dagster.core.loss_mask.datasets import register
from apsft_dagster.core.loss_mask.names import lm_file
from apsft_dagster.core.store import Store

ROWS, SEED = 300, 11
ARTIFACTS = ("census.json", "census.parquet", "build", "build.json", "verify.json", "packs", "pack.json",
             "base_packs", "base_pack.json", "comparison.json")


def _store_with_base_model(source: Store, root) -> Store:
    """A fresh store holding only the smoke run's base model (the tokenizer packing uses)."""
    store = Store(root)
    for name in (BASE_MODEL_DIR, BASE_MODEL_REPORT):
        copy = shutil.copytree if source.path(name).is_dir() else shutil.copy
        store.path(name).parent.mkdir(parents=True, exist_ok=True)
        copy(source.path(name), store.path(name))
        shutil.copy(source.receipt_path(name), store.receipt_path(name))
    return store


def _run(store: Store, name: str):
    from apsft_dagster.loss_mask.stages import LOSS_MASK_STAGES
    from conftest import run_partition

    return run_partition(store.root, LOSS_MASK_STAGES, "lm_dataset", name)


@pytest.fixture(scope="module")
def group(smoke_run, tmp_path_factory):
    _, source = smoke_run
    root = tmp_path_factory.mktemp("lm")
    store = _store_with_base_model(source, root / "store")
    data = root / "v1.jsonl"
    data.write_bytes(b"".join(dataset_lines(ROWS, SEED)))
    register(store, "v1", data)
    return store, data, _run(store, "v1")


def test_every_gate_passes_and_the_census_is_the_planted_truth(group):
    store, _, outcomes = group
    assert [o.job for o in outcomes] == ["loss_mask_job", "loss_mask_audits_job"] and all(o.ok for o in outcomes)
    checks = {(a, c): ok for o in outcomes for a, c, ok in o.checks}
    assert checks == {("lm_census", "source_unchanged"): True, ("lm_build", "counts_equal_census"): True,
                      ("lm_verify", "verified"): True, ("lm_pack", "rows_accounted"): True,
                      ("lm_pack_comparison", "differences_accounted"): True}
    truth = Counter(r for _, t in planted_rows(ROWS, SEED) for why in t.flags.values() for r in why)
    census = store.get_json(lm_file("v1", "census.json"))["total"]
    assert census["rows"] == ROWS and census["reasons"] == dict(sorted(truth.items()))
    flags = store.path(lm_file("v1", "build")) / "flags.jsonl"
    assert sum(1 for _ in open(flags)) == sum(len(t.flags) for _, t in planted_rows(ROWS, SEED))


def test_the_sql_audits_read_the_census(group):
    import duckdb

    store, _, _ = group
    truth = Counter(r for _, t in planted_rows(ROWS, SEED) for why in t.flags.values() for r in why)
    con = duckdb.connect(str(store.path("audits.duckdb")), read_only=True)
    rows = con.execute("select reason, turns from lm_reasons_by_source where dataset = 'v1' and source = 'total'"
                       " and reason <> 'union'").fetchall()
    assert dict(rows) == dict(truth)
    combos = dict(con.execute("select combination, turns from lm_reason_combinations where kind = 'combinations'")
                  .fetchall())
    expected = Counter("+".join(sorted(why)) for _, t in planted_rows(ROWS, SEED) for why in t.flags.values())
    assert combos == dict(expected)


def test_a_rerun_is_byte_identical(group, tmp_path):
    store, data, _ = group
    before = {name: store.verify(lm_file("v1", name)) for name in ARTIFACTS}
    assert all(o.ok for o in _run(store, "v1"))
    assert {name: store.verify(lm_file("v1", name)) for name in ARTIFACTS} == before


def test_a_file_changed_after_registration_is_refused_and_nothing_downstream_runs(group, tmp_path):
    store, data, _ = group
    copy = Store(tmp_path / "store")
    shutil.copytree(store.root, copy.root)
    changed = tmp_path / "v2.jsonl"
    changed.write_bytes(data.read_bytes())
    register(copy, "v2", changed)
    changed.write_bytes(data.read_bytes().replace(b"row-0000001", b"row-9999999", 1))
    outcomes = _run(copy, "v2")
    failed = [(a, c) for o in outcomes for a, c, ok in o.checks if not ok]
    assert failed == [("lm_census", "source_unchanged")] and not outcomes[0].ok
    assert not copy.exists(lm_file("v2", "census.json")) and not copy.exists(lm_file("v2", "build"))


@pytest.mark.slow
def test_demo_command_in_a_fresh_process(smoke_run, tmp_path):
    from apsft_dagster.core.paths import PROJECT_ROOT
    from conftest import variant_config

    _, source = smoke_run
    store = _store_with_base_model(source, tmp_path / "store")
    config = variant_config(tmp_path, lambda raw: raw["loss_mask"].update(demo_rows=200))
    env = {**os.environ, "APSFT_STATE_DIR": str(tmp_path / "state")}
    env.pop("DAGSTER_HOME", None)
    cmd = [sys.executable, "-m", "apsft_dagster.cli", "loss-mask", "demo", "--config", str(config),
           "--store", str(store.root)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=PROJECT_ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "demo dataset: 200 planted rows" in proc.stdout and "rows_packed" in proc.stdout
    assert json.loads(store.path(lm_file("demo", "comparison.json")).read_text())["accounted"]
