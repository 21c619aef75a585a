"""What a kill during a UI-launched run leaves (issue 37), on the local instance `apsft ui` makes:
one Stage A generation partition launched as the UI launches it (GraphQL on `__ASSET_JOB`, a real
code server, its run worker and the step's child process), over a copy of README command 1's store
with that partition's file removed.

- Only the run worker killed: the code server marks the run failed, but the step's child goes on
  holding the gpu pool's slot; `release_abandoned` leaves the slot until that child is gone too.
- The code server killed with the worker and the step: nothing marks the run, which stays STARTED
  with its slot claimed; `release_abandoned` (the next `apsft run`, or `apsft ui` as it starts)
  marks it failed and frees the slot.
- A relaunch from the UI then completes, its file byte-identical to command 1's."""

import os
import shutil
import signal
import time

import dagster as dg
import pytest

from apsft_dagster.core.layout import eval_generations
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.store import Store
from apsft_dagster.run_recovery import logged_pids, release_abandoned

pytestmark = pytest.mark.after_the_run  # a copy of the run, processes of its own (tests/conftest.py)

POLICY = "base"
ASSET = dg.AssetKey("stage_a_generations")


def _launch(context) -> str:
    from dagster_graphql.test.utils import materialize_assets

    launched = materialize_assets(context, [ASSET], [POLICY])[0].data["launchPipelineExecution"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return launched["run"]["runId"]


def _until(what, timeout: float = 180.0):
    deadline = time.monotonic() + timeout
    while not (got := what()):
        assert time.monotonic() < deadline, f"timed out waiting for {what.__doc__ or what}"
        time.sleep(0.1)
    return got


def _stepping(instance, run_id: str) -> dict[int, float]:
    """The run's processes once its step has started and run two seconds (mid-generation)."""
    _until(lambda: instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START))
    time.sleep(2.0)
    return logged_pids(instance, run_id)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _kill(*pids: int) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        _until(lambda: _gone(pid), 30)


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def _slots(instance) -> set[str]:
    return set(instance.event_log_storage.get_concurrency_run_ids())


@pytest.mark.slow
def test_a_killed_ui_run_is_failed_its_slot_freed_and_a_relaunch_writes_the_same_bytes(cli_run, tmp_path,
                                                                                     monkeypatch):
    from dagster_graphql.test.utils import define_out_of_process_context

    from apsft_dagster.core.paths import ensure_dagster_home

    _, source, _ = cli_run
    store = Store(tmp_path / "store")
    shutil.copytree(source.root, store.root)
    for name in ("APSFT_CONFIG", "APSFT_PROFILE", "DAGSTER_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("APSFT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("APSFT_STORE_DIR", str(store.root))
    ensure_dagster_home(store.root)  # as `apsft ui` makes it: runs launch at once, the gpu pool one step at a time
    workspace = str(PROJECT_ROOT / "workspace.yaml")
    with dg.DagsterInstance.get() as instance:
        with define_out_of_process_context(workspace, None, instance) as context:
            store.remove(eval_generations(POLICY))
            first = _launch(context)
            pids = _stepping(instance, first)
            worker = min(pids, key=pids.get)  # the first logged: the run worker, the code server's child
            _kill(worker)
            _until(lambda: instance.get_run_by_id(first).status == dg.DagsterRunStatus.FAILURE, 30)
            assert first in _slots(instance)
            assert release_abandoned(instance) == [] and first in _slots(instance)  # its step child still runs
            _kill(*(p for p in pids if p != worker and not _gone(p)))
            assert release_abandoned(instance) == [first] and not _slots(instance)

            store.remove(eval_generations(POLICY))
            second = _launch(context)
            pids = _stepping(instance, second)
            server = _parent(min(pids, key=pids.get))
            _kill(server, *pids)
            time.sleep(1.0)
            assert instance.get_run_by_id(second).status == dg.DagsterRunStatus.STARTED
            assert _slots(instance) == {second}
        assert release_abandoned(instance) == [second]
        assert instance.get_run_by_id(second).status == dg.DagsterRunStatus.FAILURE and not _slots(instance)

        with define_out_of_process_context(workspace, None, instance) as context:
            third = _launch(context)
            _until(lambda: instance.get_run_by_id(third).is_finished, 300)
        assert instance.get_run_by_id(third).status == dg.DagsterRunStatus.SUCCESS
    for name in (eval_generations(POLICY), eval_generations(POLICY) + ".receipt.json"):
        assert (store.root / name).read_bytes() == (source.root / name).read_bytes(), name
