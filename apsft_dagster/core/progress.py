"""Progress a long loop reports: done/total, the rate and the time left."""

from __future__ import annotations

import re
import time
from collections.abc import Callable


class Pace:
    """The rate and time left of a loop over `total` items, from the items that did work (a kept
    shard costs a hash, not a model call, so it would flatter the rate)."""

    def __init__(self, total: int, unit: str = ""):
        self.total, self.unit, self.done, self.worked, self.busy = total, unit, 0, 0, 0.0
        self.last = time.perf_counter()

    def step(self, worked: bool) -> str:
        now = time.perf_counter()
        self.done += 1
        if worked:
            self.worked, self.busy = self.worked + 1, self.busy + now - self.last
        self.last = now
        if not self.worked:
            return ""
        return rate(self.busy / self.worked, self.total - self.done, self.unit)


def rate(per_item: float, left: int, unit: str = "") -> str:
    """` · 12.5 steps/min, about 3 min left` (no unit: ` · 12.5/min, ...`)."""
    return f" · {60 / per_item:.1f}{f' {unit}' if unit else ''}/min, about {duration(per_item * left)} left"


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


STEP = re.compile(r"^step (\d+)/(\d+)\b")


def paced(say: Callable[[str], None]) -> Callable[[str], None]:
    """`say`, with the rate and time left appended to every `step N/M ...` line, timed from the
    last line that was not a step (what a loop logs before it starts)."""
    started = time.perf_counter()

    def out(message: str) -> None:
        nonlocal started
        found = STEP.match(message)
        if found is None:
            started = time.perf_counter()
        elif (done := int(found[1])) > 0:
            message += rate((time.perf_counter() - started) / done, int(found[2]) - done, "steps")
        say(message)
    return out
