"""One engine on this machine's GPU at a time, whatever store it writes (issue 59).

Dagster's `gpu` pool lets one engine step run at a time per instance, and since issue 58 each store
has its own instance: two `apsft run`s of two stores on one GPU machine would both load a model onto
the same GPU. `device_slot` is the machine's own slot, shared by every run that uses the same state
folder (core/paths.state_dir): an exclusive `flock` on `<state>/device.lock`. The kernel drops the
lock when its process dies, so a killed run never leaves the slot taken. Whoever holds it is recorded
beside it (`device.holder.json`) for a waiter to name; the wait is said at once and each half minute
(core/waiting.py), then how long it took:

    waiting for the GPU held by stage trace_bank_job (profile full, store /s/a, pid 4242) since 09:12:05
    (4 min 30 s); 35 s so far
    got the GPU after 4 min 40 s
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from apsft_dagster.core.waiting import EVERY, Holder, Waiting, load_holder, write_holder

LOCK = "device.lock"
RECORD = "device.holder.json"
WHAT = "the GPU"
POLL = 1.0  # seconds between two tries for the lock


@contextmanager
def device_slot(state: str | os.PathLike, holder: Holder, say: Callable[[str], None], poll: float = POLL, *,
                every: float = EVERY, clock: Callable[[], float] = time.time,
                sleep: Callable[[float], None] = time.sleep) -> Iterator[Holder]:
    """Hold this machine's device slot for the block: wait for it (said through `say`), record
    `holder` (its `since` the moment it got the slot), and free both on exit. Yields the record."""
    state = Path(state)
    state.mkdir(parents=True, exist_ok=True)
    fd = os.open(state / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _acquire(fd, state, say, poll, every, clock, sleep)
        held = dataclasses.replace(holder, since=clock())
        write_holder(state / RECORD, held)
        try:
            yield held
        finally:
            (state / RECORD).unlink(missing_ok=True)  # before the lock goes: the next holder's record stays
    finally:
        os.close(fd)  # the lock goes with its last descriptor


def _acquire(fd: int, state: Path, say: Callable[[str], None], poll: float, every: float,
             clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
    wait = None
    while not _try(fd):
        wait = wait or Waiting(WHAT, clock(), every)
        if line := wait.tick(clock(), current_holder(state)):
            say(line)
        sleep(poll)
    if wait is not None and (line := wait.ended(clock())):
        say(line)


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def current_holder(state: str | os.PathLike) -> Holder | None:
    """Who holds the slot as recorded, or None: no record, an unreadable one, or one left by a process
    that is gone (a killed holder's record stays until the next holder writes its own)."""
    holder = load_holder(Path(state) / RECORD)
    return None if holder is None or holder.gone() else holder
