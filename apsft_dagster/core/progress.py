"""Progress a long loop reports: done/total, the rate and the time left."""

from __future__ import annotations

import time


class Pace:
    """The rate and time left of a loop over `total` items, from the items that did work (a kept
    shard costs a hash, not a model call, so it would flatter the rate)."""

    def __init__(self, total: int):
        self.total, self.done, self.worked, self.busy = total, 0, 0, 0.0
        self.last = time.perf_counter()

    def step(self, worked: bool) -> str:
        now = time.perf_counter()
        self.done += 1
        if worked:
            self.worked, self.busy = self.worked + 1, self.busy + now - self.last
        self.last = now
        if not self.worked:
            return ""
        per_item = self.busy / self.worked
        return f" · {60 / per_item:.1f}/min, about {_duration(per_item * (self.total - self.done))} left"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
