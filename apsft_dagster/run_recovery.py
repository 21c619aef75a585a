"""Which process runs a run, and recovery from a killed one: its unfinished runs are marked failed
and their pool slots freed (`apsft run` does this before each sequence, `apsft ui` as it starts).

Two kinds of run, two ways to know their processes:
- `apsft run`'s own runs carry `apsft/runner` (host:pid:start of the process executing them);
- a run launched from the UI on a local instance runs in the code server's child (the run worker)
  and, under the multiprocess executor, in one child per step. Dagster logs each one's pid (the
  worker's and the executor's engine events, each step's STEP_WORKER_STARTED), with the time. A pid
  logged at time t whose process now is gone, a zombie, or started after t, is gone. When the code
  server dies with its worker nothing else marks such a run, which stays STARTED with its slot
  claimed; when only the worker dies the server marks it failed, but its step child may still hold
  the GPU: its slot is freed only once every process of the run is gone.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import dagster as dg
from dagster._core.storage.tags import GRPC_INFO_TAG

from apsft_dagster.core.leftovers import alive
from apsft_dagster.run_tags import RUNNER_TAG  # its value: host:pid:start of the process that executes the run

WORKER_EVENTS = {dg.DagsterEventType.ENGINE_EVENT, dg.DagsterEventType.STEP_WORKER_STARTED}


def this_process(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid)}"


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) from /proc (Linux), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return None


def _start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), so a reused pid is not taken for it."""
    found = _stat(pid)
    return found[1] if found else "?"


def _gone(process: str) -> bool:
    """True when the tagged process ran on this host and no longer exists (a pid now held by a
    process that started at another time is another process). Other hosts: unknown, so False."""
    host, _, rest = process.partition(":")
    pid, _, ticks = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if ticks == "?":  # no /proc when it was tagged (not Linux): whether the pid exists is all there is
        return not alive(int(pid))
    found = _stat(int(pid))
    return found is None or found[0] == "Z" or found[1] != ticks  # a zombie is killed, only not yet reaped


def _boot_time() -> float:
    with open("/proc/stat") as fh:
        return float(next(line.split()[1] for line in fh if line.startswith("btime")))


def _pid_gone(pid: int, seen_at: float) -> bool:
    """A pid that logged an event at `seen_at` (epoch seconds) was alive then: gone when no process
    holds it now, a zombie does, or one started after that (a reuse; btime is whole seconds)."""
    found = _stat(pid)
    if found is None or found[0] == "Z":
        return True
    return _boot_time() + int(found[1]) / os.sysconf("SC_CLK_TCK") > seen_at + 2.0


def _launched_here(run: dg.DagsterRun) -> bool:
    """Launched by a local instance's code server on this host (its socket, or this host's name)."""
    try:
        info = json.loads(run.tags.get(GRPC_INFO_TAG) or "{}")
    except ValueError:
        return False
    return "socket" in info or info.get("host") in ("localhost", "127.0.0.1", socket.gethostname())


def logged_pids(instance: dg.DagsterInstance, run_id: str) -> dict[int, float]:
    """Each pid the run's events name (worker, executor, step children), with when it was first logged."""
    pids: dict[int, float] = {}
    for record in instance.all_logs(run_id, of_type=WORKER_EVENTS):
        data = record.dagster_event.event_specific_data if record.dagster_event else None
        value = (getattr(data, "metadata", None) or {}).get("pid")
        if value is not None and str(value.value).isdigit():
            pids.setdefault(int(value.value), record.timestamp)
    return pids


def processes_gone(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool | None:
    """True: every process that executed the run is gone; False: one is alive; None: not known
    (another host, or no process logged yet)."""
    if RUNNER_TAG in run.tags:
        return _gone(run.tags[RUNNER_TAG])
    if not _launched_here(run):
        return None
    pids = logged_pids(instance, run.run_id)
    return all(_pid_gone(pid, at) for pid, at in pids.items()) if pids else None


def release_abandoned(instance: dg.DagsterInstance) -> list[str]:
    """Runs left unfinished by a killed process are marked failed and their pool slots freed.

    With a pool limit (the `gpu` pool) a killed run would otherwise keep its slot claimed and the
    next run's GPU step would wait for it forever. Touched: unfinished runs whose processes on this
    host are all gone (`apsft run`'s, and the UI's on a local instance), and finished runs that still
    hold slots, unless a process of theirs still runs (a step child that outlived its killed run
    worker holds the GPU). A team instance's daemon does the same across hosts (deploy/dagster.yaml)."""
    unfinished = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED,
                                                                 dg.DagsterRunStatus.STARTING]))
    holders = {r.run_id: r for r in unfinished if processes_gone(instance, r)}
    for run_id in instance.event_log_storage.get_concurrency_run_ids():
        run = instance.get_run_by_id(run_id)
        if run is None or (run.is_finished and (RUNNER_TAG in run.tags or processes_gone(instance, run) is not False)):
            holders[run_id] = run
    for run_id, run in sorted(holders.items()):
        if run is not None and not run.is_finished:
            instance.report_run_failed(run, "the processes running it are gone (killed); marked failed and its pool "
                                            "slots freed (apsft_dagster/run_recovery.py)")
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)
    return sorted(holders)


def unfinished(instance: dg.DagsterInstance) -> list[str]:
    """What a resumed `apsft run` must not leave behind in the instance: a run not finished (started,
    starting, queued or never started) or a pool slot still claimed."""
    open_runs = instance.get_runs(filters=dg.RunsFilter(statuses=[
        dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.QUEUED,
        dg.DagsterRunStatus.NOT_STARTED]))
    return ([f"run {r.run_id} ({r.job_name}) is still {r.status.value}" for r in open_runs]
            + [f"a pool slot is still claimed by run {r}" for r in sorted(instance.event_log_storage
                                                                          .get_concurrency_run_ids())])


def sweep_leftovers(store: str) -> list[Path]:
    """What killed processes left on disk: temp siblings in the store and the model cache
    (core/leftovers.py) and the second core's helper folders, each only where its process is gone."""
    from apsft_dagster.core.leftovers import sweep
    from apsft_dagster.core.paths import model_cache_dir
    from apsft_dagster.workers.local import sweep_folders

    cache = model_cache_dir()
    return [*([] if "://" in str(store) else sweep(store)), *(sweep(cache) if cache else []), *sweep_folders()]


def said(gone: list[Path]) -> None:
    """One line naming what `sweep_leftovers` removed (nothing when it removed nothing)."""
    if gone:
        print(f"  removed {len(gone)} temp file(s) killed processes left: "
              + ", ".join(str(p) for p in gone[:3]) + (" ..." if len(gone) > 3 else ""), flush=True)
