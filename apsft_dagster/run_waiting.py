"""A run's wait for a pool slot, said aloud (issue 59; the line and its timing: core/waiting.py).

An engine stage's asset sits in the `gpu` pool (assets/common.py): the instance runs one such step
at a time, so a second run of the same instance (a UI launch beside `apsft run`, two runs of one
store, or any two runs of a team instance every store shares through `DAGSTER_HOME`) waits inside
Dagster's executor before its step starts, where no asset code runs to say so. `attended` wraps
one run's execution: it records who runs it (run id, profile, store, pid, since) in the instance's
`holders/` folder for a waiter to read, and a thread beside the executor looks each `POLL` seconds
for a step of this run waiting for a slot; such a wait is said on stderr and in the run's Dagster
log at once and then each half minute, with the run holding the slot and since when, and its end.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Set
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg

from apsft_dagster.core.progress import shown
from apsft_dagster.core.waiting import EVERY, Holder, Waiting, read_holder, record_holder, release_holder

POLL = 1.0  # seconds between two looks at the instance's pools while a pooled run executes


def holders_folder(instance: dg.DagsterInstance) -> Path:
    return Path(instance.root_directory) / "holders"


def _epoch(stamp: datetime) -> float:
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).timestamp()


def pool_waits(instance: dg.DagsterInstance, run_id: str) -> list[tuple[str, str, float, Holder | None]]:
    """(pool, step, waiting since, holder) for each step of `run_id` that waits for a pool's slot.
    The holder is the longest-holding other run, as its runner recorded it, with the time it took
    the slot; a run nobody recorded (a UI launch) is its run id and that time alone."""
    storage, found = instance.event_log_storage, []
    if not storage.supports_global_concurrency_limits:
        return found
    for pool in sorted(storage.get_concurrency_keys()):
        info = storage.get_concurrency_info(pool)
        mine = [s for s in info.pending_steps if s.run_id == run_id and s.assigned_timestamp is None]
        if not mine:
            continue
        held = sorted((_epoch(s.assigned_timestamp), s.run_id) for s in info.pending_steps
                      if s.assigned_timestamp is not None and s.run_id != run_id)
        holder = None
        if held:
            since, other = held[0]
            recorded = read_holder(holders_folder(instance), other)
            holder = dataclasses.replace(recorded, since=since) if recorded else Holder(other, since)
        found += [(pool, s.step_key, _epoch(s.enqueued_timestamp), holder) for s in mine]
    return found


def watch(instance: dg.DagsterInstance, run_id: str, stop: threading.Event, say: Callable[[str, str], None],
          clock: Callable[[], float] = time.time, poll: float = POLL, every: float = EVERY) -> None:
    """Until `stop`: each wait of `run_id`'s steps for a pool slot said through `say(step, line)` at
    once and each `every` seconds, and its end once it was said."""
    waits: dict[tuple[str, str], Waiting] = {}
    while True:
        try:
            _look(waits, pool_waits(instance, run_id), clock(), say, every)
        except Exception:  # noqa: BLE001 - a report on the run must never break it; the next look retries
            pass
        if stop.wait(poll):
            return


def _look(waits: dict[tuple[str, str], Waiting], found: list, now: float, say: Callable[[str, str], None],
          every: float) -> None:
    """One look: a wait that ended says so (when it was said), each wait due a line says it."""
    now_waiting = {(pool, step): (since, holder) for pool, step, since, holder in found}
    for key in [k for k in waits if k not in now_waiting]:
        if line := waits.pop(key).ended(now):
            say(key[1], line)
    for (pool, step), (since, holder) in now_waiting.items():
        if line := waits.setdefault((pool, step), Waiting(f"the {pool} slot", since, every)).tick(now, holder):
            say(step, line)


def _this_run() -> tuple[str | None, str | None]:
    """(profile, store) the definitions of this process serve."""
    from apsft_dagster.core.paths import store_root
    from apsft_dagster.profile import definitions_config

    profile = definitions_config().profile
    return profile, str(store_root(profile))


@contextmanager
def attended(instance: dg.DagsterInstance, run_id: str, pools: Set[str], poll: float = POLL) -> Iterator[None]:
    """Around one run's execution whose steps use `pools` (nothing when none): its holder record,
    and its waits for a slot said on stderr and in its run log."""
    if not pools:
        yield
        return
    profile, store = _this_run()
    folder, stop, shows = holders_folder(instance), threading.Event(), {}
    record_holder(folder, Holder(run_id, time.time(), profile, store, os.getpid(), socket.gethostname()))

    def say(step: str, line: str) -> None:
        shows.setdefault(step, shown(step))(line)
        if (run := instance.get_run_by_id(run_id)) is not None:
            instance.report_engine_event(f"{step}: {line}", run)

    thread = threading.Thread(target=watch, args=(instance, run_id, stop, say), kwargs={"poll": poll},
                              name="apsft-pool-wait", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        release_holder(folder, run_id)
