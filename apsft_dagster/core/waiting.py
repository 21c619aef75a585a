"""A wait said aloud: what a stage waits for, who holds it, and since when (issue 59).

A stage that waits for a pool slot (the `gpu` pool: one engine step at a time per instance) or for
a device says so at once and then each half minute, so a wait never reads as a hang:

    trace_bank: waiting for the gpu slot held by run 1a2b3c4d (profile laptop, store /s, pid 4242)
    since 09:12:05 (4 min 30 s); 35 s so far

`waiting_line` makes that line and `Waiting` decides when the next one is due, from a clock its caller
reads (any wait: a Dagster pool slot, a device Ray has yet to place a worker on). Whoever runs a run
records who it is (`Holder`: run id, profile, store, pid, host, since) in a folder the waiter reads
(`record_holder`, `read_holder`); a holder whose process is gone is never shown as holding.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from apsft_dagster.core.leftovers import alive

EVERY = 30.0  # seconds between two lines of one wait


@dataclass(frozen=True)
class Holder:
    """Who holds what a stage waits for: a run, and where it is known, its profile, store and process."""
    run_id: str
    since: float  # epoch seconds
    profile: str | None = None
    store: str | None = None
    pid: int | None = None
    host: str | None = None
    stage: str | None = None  # a hold by a stage rather than one run: the machine's device slot (core/device_slot.py)

    def named(self) -> str:
        """`stage trace_bank_job`, else `run 1a2b3c4d` (a Dagster run id's first 8 hex)."""
        return f"stage {self.stage}" if self.stage else f"run {self.run_id[:8]}"

    def gone(self, host: str | None = None) -> bool:
        """Its recorded process ran on this host and no longer exists (another host's: not known, so False)."""
        here = host or socket.gethostname()
        return self.pid is not None and self.host in (None, here) and not alive(self.pid)


def clock(at: float) -> str:
    """`09:12:05`: an epoch time on this machine's clock."""
    return time.strftime("%H:%M:%S", time.localtime(at))


def elapsed(seconds: float) -> str:
    """`35 s`, `4 min 30 s`, `2 h 5 min`."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def waiting_line(what: str, holder: Holder | None, since: float, now: float) -> str:
    """One line of a wait for `what` that began at `since`, at `now` (epoch seconds), and who holds it
    where that is known (a holder whose process is gone is said to be gone, with the way out)."""
    so_far = f"{elapsed(now - since)} so far"
    if holder is None:
        return f"waiting for {what} since {clock(since)}; {so_far}"
    run = holder.named()
    if holder.gone():
        return (f"waiting for {what}: {run} still claims it but its process (pid {holder.pid}) is gone; "
                f"`apsft ui` or the next `apsft run` of its store frees the slot; {so_far}")
    known = _who(holder)
    return (f"waiting for {what} held by {run}{f' ({known})' if known else ''} since {clock(holder.since)} "
            f"({elapsed(now - holder.since)}); {so_far}")


def _who(holder: Holder) -> str:
    """`profile laptop, store /s, pid 4242` (another host's process: `pid 4242 on gpu-2`), as far as recorded."""
    here = socket.gethostname()
    process = None if holder.pid is None else f"pid {holder.pid}" + (
        f" on {holder.host}" if holder.host and holder.host != here else "")
    parts = [f"profile {holder.profile}" if holder.profile else None,
             f"store {holder.store}" if holder.store else None, process]
    return ", ".join(p for p in parts if p)


class Waiting:
    """One wait for `what`, begun at `since`: `tick(now, holder)` gives its line at the first tick
    and again once `every` seconds have passed since the last line; None between."""

    def __init__(self, what: str, since: float, every: float = EVERY):
        self.what, self.since, self.every, self.said_at = what, since, every, None

    def tick(self, now: float, holder: Holder | None = None) -> str | None:
        if self.said_at is not None and now - self.said_at < self.every:
            return None
        self.said_at = now
        return waiting_line(self.what, holder, self.since, now)

    def ended(self, now: float) -> str | None:
        """`got the gpu slot after 4 min 30 s`, once a wait that was said ends (None if it never was)."""
        return None if self.said_at is None else f"got {self.what} after {elapsed(now - self.since)}"


def _record(folder: Path, run_id: str) -> Path:
    return Path(folder) / f"{run_id}.json"


def write_holder(path: Path, holder: Holder) -> Path:
    """`holder` as JSON at `path`, atomically (core/store.py `write_atomic`): a reader never sees half."""
    from apsft_dagster.core.store import write_atomic

    write_atomic(path, json.dumps(asdict(holder), sort_keys=True).encode())
    return path


def load_holder(path: Path) -> Holder | None:
    """The holder recorded at `path`, or None when there is none or it is unreadable."""
    try:
        return Holder(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def record_holder(folder: str | os.PathLike, holder: Holder) -> Path:
    """Write who runs `holder.run_id` where a waiter reads it."""
    return write_holder(_record(Path(folder), holder.run_id), holder)


def release_holder(folder: str | os.PathLike, run_id: str) -> None:
    _record(Path(folder), run_id).unlink(missing_ok=True)


def read_holder(folder: str | os.PathLike, run_id: str) -> Holder | None:
    """The recorded holder of `run_id`, or None when none is recorded or the record is unreadable."""
    return load_holder(_record(Path(folder), run_id))
