"""The trace bank assets: a full smoke harvest, checks, crash/resume, import and export."""

import os
import shutil
import signal
import subprocess
import sys
import time

import dagster as dg
import pytest

from apsft_dagster.core.bank import InheritedBank, export_bank
from apsft_dagster.core.errors import HashMismatchError
from apsft_dagster.core.layout import TRACE_BANK as BANK
from apsft_dagster.core.layout import key_file, shard_file, summary_file
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.store import Store
from apsft_dagster.experiment.assets.trace_bank import trace_bank, trace_bank_index
from apsft_dagster.experiment.partitions import train_task_partitions
from apsft_dagster.run_tags import single_run_tags
from conftest import smoke_resources, variant_config

KEYS = train_task_partitions.get_partition_keys()


def _bank_files(store: Store) -> dict[str, bytes]:
    return {t: store.path(shard_file(BANK, t)).read_bytes() for t in KEYS}


def _store_without_bank(source: Store, target, keep: int = 0) -> Store:
    """A copy of `source` without its trace bank, except the shards of the first `keep` tasks."""
    shutil.copytree(source.root, target, ignore=shutil.ignore_patterns(BANK))
    store = Store(target)
    for task in KEYS[:keep]:  # each kept shard with its key (what made it), as the harvest wrote them
        for name in (key_file(BANK, task), shard_file(BANK, task)):
            store.put_bytes(name, source.get_bytes(name))
    return store


def test_smoke_harvest_covers_every_task_and_passes_every_check(smoke_run):
    results, store = smoke_run
    assert results["trace_bank"].success
    materialized = {e.partition for e in results["trace_bank"].get_asset_materialization_events()}
    assert materialized == set(KEYS)  # every train task, in one run
    index_result = results["trace_bank_index"]
    checks = {e.check_name: e.passed for e in index_result.get_asset_check_evaluations()}
    assert checks == {"every_task_once": True, "cell_counts": True, "hash_parity": True,
                      "unique_trace_ids": True, "min_eligible": True}
    summary = store.get_json(summary_file(BANK))
    assert summary["tasks"] == 18 and summary["traces"] >= 18 * 8
    assert summary["eligible"] <= summary["natural_closes"] <= summary["traces"]
    assert summary["continuations"] > 0  # the smoke allowance is short enough to exercise them
    meta = index_result.get_asset_materialization_events()[0].materialization.metadata
    assert meta["eligible"].value == summary["eligible"] and meta["traces"].value == summary["traces"]


def test_each_task_partition_carries_its_own_figures(smoke_run):
    results, store = smoke_run
    events = {e.partition: e.materialization.metadata for e in results["trace_bank"].get_asset_materialization_events()}
    for task in KEYS:
        shard = store.get_parquet(shard_file(BANK, task))
        meta = events[task]
        assert meta["shard_sha256"].value == store.verify(shard_file(BANK, task))
        assert (meta["traces"].value, meta["eligible"].value) == (shard.height, int(shard["eligible"].sum()))
    assert len({m["shard_sha256"].value for m in events.values()}) == len(KEYS)


def test_tampered_shard_fails_hash_parity(smoke_run, tmp_path):
    _, store = smoke_run
    copy = Store(tmp_path / "s")
    shutil.copytree(store.root, copy.root)
    path = copy.path(shard_file(BANK, KEYS[3]))
    path.write_bytes(path.read_bytes()[:-1] + b"\0")
    result = dg.materialize([trace_bank_index], resources=smoke_resources(copy.root), raise_on_error=False)
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert not checks["hash_parity"].passed and not checks["every_task_once"].passed
    assert KEYS[3] in checks["hash_parity"].metadata["first_problems"].value


HARVEST = """
import dagster as dg, sys
from apsft_dagster.experiment.assets.trace_bank import trace_bank
from apsft_dagster.experiment.partitions import train_task_partitions
from apsft_dagster.run_tags import single_run_tags
sys.path.insert(0, "tests")
from conftest import smoke_resources, variant_config
keys = train_task_partitions.get_partition_keys()
dg.materialize([trace_bank], resources=smoke_resources(sys.argv[1]), tags=single_run_tags(keys))
"""


@pytest.mark.slow
def test_killed_harvest_resumes_to_a_byte_identical_bank(smoke_run, tmp_path):
    _, reference = smoke_run
    kept = len(KEYS) - 6  # six tasks to harvest: the kill lands after two of them
    store = _store_without_bank(reference, tmp_path / "s", keep=kept)
    env = {**os.environ, "APSFT_PROFILE": "smoke"}
    proc = subprocess.Popen([sys.executable, "-c", HARVEST, str(store.root)], cwd=PROJECT_ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    shards = store.root / BANK / "shards"
    while time.monotonic() < deadline and len(list(shards.glob("*.receipt.json"))) < kept + 2:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = len(list(shards.glob("*.receipt.json")))
    assert kept + 2 <= done < len(KEYS), "the kill must land mid-harvest"
    dg.materialize([trace_bank], resources=smoke_resources(store.root), tags=single_run_tags(KEYS))  # the resume
    assert _bank_files(store) == _bank_files(reference)
    assert not [p for p in shards.iterdir() if ".tmp-" in p.name]  # no partial shard left behind


@pytest.mark.slow
def test_export_import_round_trip_and_refusals(smoke_run, tmp_path):
    _, reference = smoke_run
    exported = tmp_path / "inherited"
    inherited = len(KEYS) - 1
    digest = export_bank(reference, BANK, KEYS[:inherited], exported)
    bank = InheritedBank(exported / "index.json", digest)
    assert all(t in bank for t in KEYS[:inherited]) and KEYS[inherited] not in bank

    # an inherited bank feeds the asset: all but one task imported byte for byte, that one generated
    config_path = variant_config(tmp_path, lambda raw: raw["harvest"].update(
        inherited_index=str(exported / "index.json"), inherited_index_sha256=digest))
    store = _store_without_bank(reference, tmp_path / "s")
    result = dg.materialize([trace_bank], resources=smoke_resources(store.root, config_path=str(config_path)),
                            tags=single_run_tags(KEYS))
    meta = result.get_asset_materialization_events()[0].materialization.metadata
    assert (meta["imported"].value, meta["generated"].value) == (inherited, 1)
    assert _bank_files(store) == _bank_files(reference)


def test_wrong_index_digest_or_tampered_shard_imports_nothing(smoke_run, tmp_path):
    _, reference = smoke_run
    exported = tmp_path / "inherited"
    digest = export_bank(reference, BANK, KEYS[:3], exported)
    with pytest.raises(HashMismatchError, match=r"index.json: index SHA-256 is [0-9a-f]{64} "
                                                r"but harvest.inherited_index_sha256 records 0{64}"):
        InheritedBank(exported / "index.json", "0" * 64)
    shard = exported / "shards" / f"{KEYS[1]}.parquet"
    shard.write_bytes(shard.read_bytes() + b"x")
    with pytest.raises(HashMismatchError, match=f"{KEYS[1]}.parquet: shard of inherited task {KEYS[1]}"):
        InheritedBank(exported / "index.json", digest)
    # the asset refuses before writing a single shard
    config_path = variant_config(tmp_path, lambda raw: raw["harvest"].update(
        inherited_index=str(exported / "index.json"), inherited_index_sha256=digest))
    store = _store_without_bank(reference, tmp_path / "s")
    result = dg.materialize([trace_bank], resources=smoke_resources(store.root, config_path=str(config_path)),
                            tags=single_run_tags(KEYS), raise_on_error=False)
    assert not result.success
    assert not (store.root / BANK).exists()
