"""The PostgreSQL lane: deploy/dagster.yaml, as shipped, over a throwaway PostgreSQL server on
127.0.0.1 (tests/pg_server.py starts it and stops it whatever happens).

On a copy of the smoke store with three trace-bank shards removed, the harvest stage runs those
three task partitions as one single-run backfill (real generation), the bank stage's blocking
checks pass, and after a shard is tampered with the bank stage fails its blocking check and the
alert sensor, evaluated the way the daemon evaluates it (a cursor over PostgreSQL's global event
ids), raises the alert. Everything is read back through a second instance opened from the same
file, and the counts straight from PostgreSQL's tables.
"""

import json
import shutil

import dagster as dg
import psycopg2
import pytest

from apsft_dagster.core.alerts import alert_path
from apsft_dagster.core.layout import shard_file
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.store import Store
from apsft_dagster.experiment.partitions import train_task_partitions
from apsft_dagster.experiment.stages import STAGES
from apsft_dagster.runner import StageOutcome, run_stages
from conftest import StageRuns, smoke_definitions
from pg_server import DATABASE, PASSWORD, USER, restart, running_server

DEPLOY_YAML = PROJECT_ROOT / "deploy" / "dagster.yaml"
STAGE = {s.job: s for s in STAGES}


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    """(server, DAGSTER_HOME holding deploy/dagster.yaml verbatim, state folder) with the env set."""
    with running_server() as server, pytest.MonkeyPatch.context() as mp:
        home, state = tmp_path_factory.mktemp("pg_home"), tmp_path_factory.mktemp("pg_state")
        shutil.copy(DEPLOY_YAML, home / "dagster.yaml")
        for name, value in {**server.env(), "DAGSTER_HOME": str(home), "APSFT_STATE_DIR": str(state)}.items():
            mp.setenv(name, value)
        mp.delenv("APSFT_ALERT_WEBHOOK", raising=False)
        yield server, home, state


def _sql(server, query: str, *args) -> list[tuple]:
    with psycopg2.connect(host=server.host, port=server.port, user=USER, password=PASSWORD, dbname=DATABASE) as c:
        with c.cursor() as cur:
            cur.execute(query, args)
            return cur.fetchall()


def test_the_deploy_instance_is_postgres_with_a_queue_and_a_gpu_pool_limit(postgres):
    with dg.DagsterInstance.get() as instance:
        kinds = [type(s).__name__ for s in (instance.run_storage, instance.event_log_storage,
                                             instance.schedule_storage, instance.run_coordinator)]
        assert kinds == ["PostgresRunStorage", "PostgresEventLogStorage", "PostgresScheduleStorage",
                         "QueuedStageRunCoordinator"]
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
        assert not instance.event_log_storage.is_run_sharded  # one global event id: the sensors' cursor


def test_backfill_checks_and_alert_sensor_read_back_from_postgres(postgres, smoke_run, tmp_path):
    from apsft_dagster.sensors import run_failure_alert_sensor

    server, _, _ = postgres
    _, smoke_store = smoke_run
    shutil.copytree(smoke_store.root, tmp_path / "store")
    store = Store(tmp_path / "store")
    keys = train_task_partitions.get_partition_keys()[:3]
    originals = {k: smoke_store.get_bytes(shard_file("trace_bank", k)) for k in keys}
    for k in keys:
        store.remove(shard_file("trace_bank", k))
    defs = smoke_definitions(store.root)

    with dg.DagsterInstance.get() as instance:
        harvest, bank = run_stages(defs, instance, [STAGE["trace_bank_job"], STAGE["bank_and_parity_job"]],
                                   partition_keys={"trace_bank_job": keys}, alert=False)
        assert harvest.ok and bank.ok, (harvest, bank)
        for k in keys:  # regenerated for real, byte for byte
            assert store.get_bytes(shard_file("trace_bank", k)) == originals[k]
        # the daemon's sensor starts its cursor at the newest event, so only later runs count
        context = dg.build_sensor_context(instance=instance)
        assert not run_failure_alert_sensor.evaluate_tick(context).run_requests
        cursor = context.cursor
        assert cursor

        shard = store.path(shard_file("trace_bank", keys[1]))
        shard.write_bytes(shard.read_bytes() + b"tampered")
        tampered = defs.resolve_job_def("bank_and_parity_job").execute_in_process(
            instance=instance, raise_on_error=False, tags={"apsft/lane": "postgres"})
        assert not tampered.success
        run_failure_alert_sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=cursor))

    with dg.DagsterInstance.get() as fresh:  # a second instance from the same file: nothing came from memory
        (run_id,) = harvest.run_ids
        run = fresh.get_run_by_id(run_id)
        assert run.status == dg.DagsterRunStatus.SUCCESS and run.job_name == "trace_bank_job"
        assert (run.tags["dagster/asset_partition_range_start"], run.tags["dagster/asset_partition_range_end"]) == (
            keys[0], keys[-1])
        materialized = fresh.get_materialized_partitions(dg.AssetKey("trace_bank"))
        assert set(keys) <= materialized
        checks = {(e.asset_key.to_user_string(), e.check_name): e.passed
                  for e in StageRuns(fresh, bank).get_asset_check_evaluations()}
        assert {name for (asset, name) in checks if asset == "trace_bank_index"} == {
            "every_task_once", "cell_counts", "hash_parity", "unique_trace_ids", "min_eligible"}
        assert all(checks.values())
        tampered_runs = StageRuns(fresh, StageOutcome("bank_and_parity_job", run_ids=[tampered.run_id]))
        failed = {e.check_name for e in tampered_runs.get_asset_check_evaluations() if not e.passed}
        assert "hash_parity" in failed, failed
        assert fresh.get_run_by_id(tampered.run_id).status == dg.DagsterRunStatus.FAILURE

    (runs,) = _sql(server, "SELECT count(*) FROM runs WHERE run_id IN %s", (run_id, tampered.run_id))
    assert runs == (2,)
    (evaluations,) = _sql(server, "SELECT count(*) FROM event_logs WHERE run_id = %s AND "
                          "dagster_event_type = 'ASSET_CHECK_EVALUATION'", tampered.run_id)
    assert evaluations[0] >= 5

    alerts = [json.loads(line) for line in alert_path().read_text().splitlines()]  # under the lane's state folder
    assert [(a["kind"], a["run_id"]) for a in alerts][0] == ("run_failed", tampered.run_id)
    assert ("asset_check_failed", "trace_bank_index", "hash_parity") in {
        (a["kind"], a.get("asset_key"), a.get("check_name")) for a in alerts}
    assert all(a["run_id"] == tampered.run_id for a in alerts)  # the successful runs before the cursor: none


def test_a_restart_of_the_server_between_two_stages_loses_no_event(postgres, smoke_run, tmp_path):
    """One instance, as the daemon or a long `apsft run` holds it: a stage, PostgreSQL restarted
    (every connection cut), the next stage; it runs, and its run and events are in the tables."""
    server, _, _ = postgres
    _, smoke_store = smoke_run
    shutil.copytree(smoke_store.root, tmp_path / "store")
    defs = smoke_definitions(tmp_path / "store")
    started = lambda: _sql(server, "SELECT pg_postmaster_start_time()")[0][0]  # noqa: E731
    with dg.DagsterInstance.get() as instance:
        (before,) = run_stages(defs, instance, [STAGE["score_bank_index_job"]], alert=False)
        first_start = started()
        restart(server)
        assert started() > first_start  # a new server process
        (after,) = run_stages(defs, instance, [STAGE["r1_labels_index_job"]], alert=False)
    assert before.ok and after.ok, (before, after)
    (run_id,) = after.run_ids
    (status,) = _sql(server, "SELECT status FROM runs WHERE run_id = %s", run_id)
    assert status == ("SUCCESS",)
    (events,) = _sql(server, "SELECT count(*) FROM event_logs WHERE run_id = %s AND dagster_event_type IN "
                     "('ASSET_MATERIALIZATION', 'ASSET_CHECK_EVALUATION', 'RUN_SUCCESS')", run_id)
    assert events[0] >= 3  # the materialization, its checks and the run's end landed after the restart


def test_the_server_is_gone_after_the_lane():
    """Teardown is part of the lane: a server started and stopped leaves no process or folder."""
    with running_server() as server:
        (version,) = _sql(server, "SHOW server_version")
        assert version[0].split(".")[0].isdigit() and (server.folder / "data" / "PG_VERSION").is_file()
    assert not server.folder.exists()
    with pytest.raises(psycopg2.OperationalError):
        _sql(server, "SELECT 1")


KILLED = """
import os, signal, sys
sys.path.insert(0, "tests")
from pg_server import running_server
with running_server() as server:
    print(server.folder, server.port, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no `finally` runs after this
"""


def test_a_killed_test_process_leaves_no_server_behind():
    import subprocess
    import sys
    import time
    from pathlib import Path

    proc = subprocess.run([sys.executable, "-c", KILLED], capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert proc.returncode == -9, proc.stderr
    folder, port = proc.stdout.split()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(folder).exists():
        time.sleep(0.2)
    assert not Path(folder).exists()
    with pytest.raises(psycopg2.OperationalError):
        psycopg2.connect(host="127.0.0.1", port=int(port), user=USER, password=PASSWORD, dbname=DATABASE,
                         connect_timeout=3)

