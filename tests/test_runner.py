"""The stage runner: key ranges, partition subsets, child processes, the UI's code location, alerts."""

import json
import shutil

import dagster as dg
import pytest

from apsft_dagster.core.alerts import alert_path
from apsft_dagster.core.layout import TRACE_BANK, shard_file
from apsft_dagster.core.paths import ensure_dagster_home
from apsft_dagster.core.store import Store
from apsft_dagster.experiment.partitions import train_task_partitions
from apsft_dagster.experiment.stages import STAGES
from apsft_dagster.runner import key_ranges, run_stages, select_stages, workspace_origin
from apsft_dagster.stage import Stage
from conftest import smoke_definitions

KEYS = train_task_partitions.get_partition_keys()


def test_key_ranges_are_maximal_runs_in_partition_order():
    keys = list("abcdefg")
    assert key_ranges(["e", "a", "b", "d", "g"], keys) == [["a", "b"], ["d", "e"], ["g"]]
    assert key_ranges(keys, keys) == [keys]
    assert key_ranges(["c", "c"], keys) == [["c"]]
    with pytest.raises(ValueError, match=r"unknown partition keys \['z'\]"):
        key_ranges(["z"], keys)


def test_select_stages_starts_at_a_stage_and_names_the_known_ones():
    assert [s.job for s in select_stages(STAGES, "evidence_seal_job")] == [s.job for s in STAGES[7:]]
    with pytest.raises(ValueError, match="no such stage; stages are tasks_and_model_job, trace_bank_job"):
        select_stages(STAGES, "nope")
    assert [s.job for s in select_stages(STAGES, "score_bank_job", "r1_labels_job")] == [
        "score_bank_job", "score_bank_index_job", "r1_labels_job"]
    with pytest.raises(ValueError, match="comes after --to"):
        select_stages(STAGES, "r1_labels_job", "score_bank_job")


def test_a_stage_runs_only_the_selected_partitions(smoke_run, tmp_path):
    _, reference = smoke_run
    store = Store(tmp_path / "s")
    for name in ("task_catalog.parquet", "base_model"):  # what trace_bank reads, with receipts
        src, dst = reference.path(name), store.path(name)
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copyfile)(src, dst)
        shutil.copyfile(reference.receipt_path(name), store.receipt_path(name))
    chosen = [KEYS[4], KEYS[0]]  # not contiguous: two single-run ranges
    instance = dg.DagsterInstance.ephemeral()
    [outcome] = run_stages(smoke_definitions(store.root), instance, [STAGES[1]],
                           partition_keys={"trace_bank_job": chosen}, alert=False)
    assert outcome.ok and len(outcome.run_ids) == 2 and outcome.materialized == {"trace_bank": 2}
    written = sorted(p.name for p in (store.root / TRACE_BANK / "shards").glob("*.parquet"))
    assert written == sorted(f"{k}.parquet" for k in chosen)
    for key in chosen:  # the same bytes as the full smoke run's shards
        assert store.verify(shard_file(TRACE_BANK, key)) == reference.verify(shard_file(TRACE_BANK, key))


@pytest.fixture
def dagster_home(tmp_path, monkeypatch):
    for name in ("APSFT_CONFIG", "DAGSTER_HOME"):
        monkeypatch.setenv(name, "")  # recorded, so what ensure_dagster_home exports is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setenv("APSFT_PROFILE", "smoke")
    monkeypatch.setenv("APSFT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("APSFT_STORE_DIR", str(tmp_path / "store"))
    ensure_dagster_home(tmp_path / "store")
    with dg.DagsterInstance.get() as instance:
        yield instance


@pytest.mark.slow
def test_a_child_process_run_belongs_to_the_ui_code_location(dagster_home):
    """The in-process path is proven against the real webserver by test_ui_browser (the CLI's runs)."""
    from apsft_dagster.definitions import defs

    origin = workspace_origin()
    assert origin.location_name == "apsft_dagster.definitions"
    [outcome] = run_stages(defs, dagster_home, [STAGES[0]], origin=origin, isolate=lambda s: True)
    assert outcome.ok and outcome.materialized == {"task_catalog": 1, "base_model": 1}
    for run_id in outcome.run_ids:
        run = dagster_home.get_run_by_id(run_id)
        repo = run.remote_job_origin.repository_origin
        assert (repo.code_location_origin.location_name, repo.repository_name) == ("apsft_dagster.definitions",
                                                                                   "__repository__")
        assert run.job_name == "tasks_and_model_job"
    # the Jobs page lists runs by the repository tag: both runs are under their job
    runs = dagster_home.get_runs(dg.RunsFilter(
        job_name="tasks_and_model_job", tags={".dagster/repository": "__repository__@apsft_dagster.definitions"}))
    assert {r.run_id for r in runs} == set(outcome.run_ids)


@dg.asset(key_prefix="runner")
def guarded():
    return 1


@dg.asset_check(asset=guarded)
def loose_end():
    return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR, metadata={"problems": 1})


@dg.asset(key_prefix="runner")
def broken():
    raise RuntimeError("disk on fire")


def test_headless_runs_raise_the_sensors_alerts(tmp_path, monkeypatch):
    monkeypatch.setenv("APSFT_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("APSFT_ALERT_WEBHOOK", raising=False)
    stages = [Stage("guarded_job", (guarded,)), Stage("broken_job", (broken,))]
    defs = dg.Definitions(assets=[guarded, broken], asset_checks=[loose_end],
                          jobs=[dg.define_asset_job(s.job, selection=list(s.assets)) for s in stages])
    outcomes = run_stages(defs, dg.DagsterInstance.ephemeral(), stages)
    assert len(outcomes) == 1 and not outcomes[0].ok  # a failed check stops the sequence
    assert outcomes[0].checks == [("runner/guarded", "loose_end", False)]
    lines = [json.loads(line) for line in alert_path().read_text().splitlines()]
    assert [(a["kind"], a["check_name"]) for a in lines] == [("asset_check_failed", "loose_end")]
    failed = run_stages(defs, dg.DagsterInstance.ephemeral(), stages[1:])
    assert not failed[0].ok and not failed[0].success
    last = json.loads(alert_path().read_text().splitlines()[-1])
    assert last["kind"] == "run_failed" and last["job_name"] == "broken_job"
    assert "disk on fire" in json.dumps(last["step_errors"])


def test_cli_lines_reach_a_pipe_as_they_are_printed():
    """`apsft ... | tee log` shows each line at once: the process below prints one line, then waits;
    block buffering would hold the line until it exits."""
    import os
    import select
    import subprocess
    import sys

    code = ("import time; from apsft_dagster.cli import main; main(['validate', '--profile', 'smoke']); "
            "time.sleep(60)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as on a user's machine
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "no line reached the pipe within 30 s while the process was still running"
        assert proc.stdout.readline().startswith("smoke: valid, digest ")
        assert proc.poll() is None  # the line came before the exit, not with it
    finally:
        proc.kill()
        proc.wait()
