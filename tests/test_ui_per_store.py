"""The UI describes one store (issue 58): after a smoke run, a run of another profile and runs
against another store in the same state folder (one of them failing), the smoke store's instance,
read through Dagster's GraphQL API with the code location `apsft ui --profile smoke` serves, shows
smoke's partitions as smoke's store holds them, and its base model as smoke's run made it.

In one shared instance (before issue 58) the same reads showed the copy's failed partitions and
its later materialization; the other instances show them, so the runs did record, each in its own."""

import contextlib
import os
import shutil
import subprocess
import sys
import time

import dagster as dg
import pytest

from apsft_dagster.core.layout import TRACE_BANK, shard_file
from apsft_dagster.core.paths import PROJECT_ROOT, ensure_dagster_home, store_instance
from apsft_dagster.core.store import Store

pytestmark = pytest.mark.slow  # four `apsft run` processes and a code server, about a minute

KEYS = ("caravan-L1-000", "caravan-L1-001")
PARTITIONS = """query($path: [String!]!) { assetNodeOrError(assetKey: {path: $path}) { ... on AssetNode {
  assetPartitionStatuses { ... on DefaultPartitionStatuses {
    materializedPartitions failedPartitions materializingPartitions unmaterializedPartitions } }
  assetMaterializations(limit: 1) { runId timestamp } } } }"""
RUNS = "{ runsOrError { ... on Runs { results { jobName status } } } }"
CHOICE = ("APSFT_PROFILE", "APSFT_CONFIG", "APSFT_STORE_DIR", "DAGSTER_HOME")


def _apsft(state, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in CHOICE}
    env.update(APSFT_STATE_DIR=str(state), APSFT_SECOND_CORE="off")  # the suite's other worker has the other core
    proc = subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "run", *args], cwd=PROJECT_ROOT, text=True,
                          capture_output=True, env=env, timeout=600)
    return proc


@contextlib.contextmanager
def _ui(state, store, monkeypatch):
    """The store's instance and the smoke code location, as `apsft ui --profile smoke --store STORE`
    chooses them (the same function makes the instance), as a GraphQL request context."""
    from dagster_graphql.test.utils import define_out_of_process_context

    with monkeypatch.context() as env:
        for name in CHOICE:
            env.delenv(name, raising=False)
        env.setenv("APSFT_STATE_DIR", str(state))
        env.setenv("APSFT_PROFILE", "smoke")
        env.setenv("APSFT_STORE_DIR", str(store))
        home = ensure_dagster_home(store)
        assert home == store_instance(store, state)
        with dg.DagsterInstance.get() as instance, \
                define_out_of_process_context(str(PROJECT_ROOT / "workspace.yaml"), None, instance) as context:
            yield context


def _asset(context, name: str) -> dict:
    from dagster_graphql.test.utils import execute_dagster_graphql

    return execute_dagster_graphql(context, PARTITIONS, {"path": [name]}).data["assetNodeOrError"]


def _instance(store, state) -> dg.DagsterInstance:
    from dagster._core.instance.ref import InstanceRef

    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(store_instance(store, state))))


def test_runs_of_another_profile_and_store_never_show_in_smokes_ui(tmp_path, monkeypatch):
    from dagster_graphql.test.utils import execute_dagster_graphql

    state = tmp_path / "state"
    smoke, copy = state / "store" / "smoke", tmp_path / "copy"
    first = _apsft(state, "--to", "trace_bank_job", "--partitions", f"trace_bank_job={KEYS[0]}")
    assert first.returncode == 0, first.stdout + first.stderr
    later = time.time()
    shutil.copytree(smoke, copy)  # the copy of smoke's store (its record says smoke: it may run there)
    for args in (("--profile", "laptop_rehearsal", "--to", "tasks_and_model_job"),
                 ("--store", str(copy), "--to", "tasks_and_model_job")):
        assert (proc := _apsft(state, *args)).returncode == 0, proc.stdout + proc.stderr
    with open(copy / "base_model" / "config.json", "a") as f:
        f.write(" ")  # the copy's model changed after it was written: its trace bank run fails
    failed = _apsft(state, "--store", str(copy), "--from", "trace_bank_job", "--to", "trace_bank_job",
                    "--partitions", f"trace_bank_job={','.join(KEYS)}")
    assert failed.returncode == 1 and "FAILED trace_bank_job" in failed.stdout, failed.stdout + failed.stderr

    with _instance(copy, state) as theirs:  # the copy's runs did record: in the copy's instance
        assert theirs.get_latest_materialization_event(dg.AssetKey("base_model")).timestamp > later
        assert [r.status for r in theirs.get_runs(dg.RunsFilter(job_name="trace_bank_job"))] == [
            dg.DagsterRunStatus.FAILURE]
    with _instance(state / "store" / "laptop_rehearsal", state) as rehearsal:
        assert rehearsal.get_latest_materialization_event(dg.AssetKey("base_model")).timestamp > later

    with _ui(state, smoke, monkeypatch) as context:
        bank = _asset(context, "trace_bank")
        statuses = bank["assetPartitionStatuses"]
        every = sorted(sum((statuses[k] for k in statuses), []))
        held = [k for k in every if Store(smoke).exists(shard_file(TRACE_BANK, k))]
        assert held == [KEYS[0]]
        assert (statuses["materializedPartitions"], statuses["failedPartitions"],
                statuses["materializingPartitions"]) == (held, [], [])
        [made] = _asset(context, "base_model")["assetMaterializations"]
        assert int(made["timestamp"]) / 1000 < later  # smoke's own run's, not the later runs' of the others
        runs = execute_dagster_graphql(context, RUNS).data["runsOrError"]["results"]
        assert sorted((r["jobName"], r["status"]) for r in runs) == [("tasks_and_model_job", "SUCCESS"),
                                                                    ("trace_bank_job", "SUCCESS")]
