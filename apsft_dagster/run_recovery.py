"""Which process runs a run, and recovery from a killed `apsft run`: its unfinished runs are marked
failed and their pool slots freed (the runner does this before each sequence)."""

from __future__ import annotations

import os
import socket

import dagster as dg

from apsft_dagster.run_tags import RUNNER_TAG  # its value: host:pid:start of the process that executes the run


def this_process(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid)}"


def _start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), so a reused pid is not taken for it."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def _gone(process: str) -> bool:
    """True when the tagged process ran on this host and no longer exists (a pid now held by a
    process that started at another time is another process). Other hosts: unknown, so False."""
    host, _, rest = process.partition(":")
    pid, _, ticks = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if ticks == "?":  # no /proc when it was tagged (not Linux): whether the pid exists is all there is
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False
    return _start_ticks(int(pid)) != ticks


def release_abandoned(instance: dg.DagsterInstance) -> list[str]:
    """Runs a killed `apsft run` left unfinished are marked failed and their pool slots freed.

    With a pool limit (the `gpu` pool) a killed run would otherwise keep its slot claimed and the
    next run's GPU step would wait for it forever. Only runs tagged with a process of this host
    that is gone are touched, plus finished runs that still hold slots; a team instance's daemon
    does the same across hosts (deploy/dagster.yaml, run_monitoring)."""
    unfinished = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED,
                                                                 dg.DagsterRunStatus.STARTING]))
    holders = {r.run_id: r for r in unfinished if _gone(r.tags.get(RUNNER_TAG, ""))}
    for run_id in instance.event_log_storage.get_concurrency_run_ids():
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            holders[run_id] = run
    for run_id, run in sorted(holders.items()):
        if run is not None and not run.is_finished:
            instance.report_run_failed(run, "the process running it is gone (killed); `apsft run` marked it "
                                            "failed and freed its pool slots")
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)
    return sorted(holders)
