"""The step and its second-core helper pinned apart (workers/local.py): while the helper
lives, the step keeps the core it is on and the helper gets the next one. Beside a busy process
(three on two cores) the kernel may otherwise leave the step and its helper sharing one core while
the busy process has the other: the pair then gets one core, pinned apart one and a half (the busy
process half a core instead of two thirds). `APSFT_PIN=off`: both float as the kernel places them."""

from __future__ import annotations

import os
from pathlib import Path

PIN = "APSFT_PIN"
_held: set[int] | None = None  # the step's cores while it is pinned beside its helper


def held() -> set[int] | None:
    """The cores this process had before `pin_apart` pinned it; None while it is not pinned."""
    return _held


def pin_apart(pid: int) -> set[int] | None:
    """Pin this process to the core it is on and the helper `pid` to the next of its cores; returns
    the cores to restore (`unpin`), None where nothing was pinned. Beside a busy process (three on
    two cores) the kernel may leave the step and its helper sharing one core while the busy one has
    the other; pinned apart, each core holds one of them (docs/experiment.md, "The second core")."""
    global _held
    if os.environ.get(PIN, "on") == "off" or _held is not None or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None
    here = _current_core(allowed)
    try:
        os.sched_setaffinity(pid, {allowed[(allowed.index(here) + 1) % len(allowed)]})
        os.sched_setaffinity(0, {here})
    except OSError:  # the helper is gone already, or the platform refuses: leave both floating
        return None
    _held = set(allowed)
    return _held


def unpin(allowed: set[int] | None) -> None:
    """Give the step back the cores `pin_apart` took from it."""
    global _held
    if allowed is not None and _held is allowed:
        _held = None
        os.sched_setaffinity(0, allowed)


def _current_core(allowed: list[int]) -> int:
    try:  # field 39 of /proc/self/stat: the core this process last ran on (after the name's parenthesis)
        core = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        return allowed[0]
    return core if core in allowed else allowed[0]
