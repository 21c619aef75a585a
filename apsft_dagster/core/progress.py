"""Progress a long loop reports: done/total, the rate and the time left."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Pace:
    """The rate and time left of a loop over `total` items, from the items that did work (a kept
    shard costs a hash, not a model call, so it would flatter the rate)."""

    def __init__(self, total: int, unit: str = ""):
        self.total, self.unit, self.done, self.worked, self.busy = total, unit, 0, 0, 0.0
        self.last = time.perf_counter()

    def step(self, worked: bool, left: int | None = None, hands: int = 1) -> str:
        """One item done. `left` items still to do (default: the rest of `total`), by `hands`
        workers going at this loop's pace (a step and its second-core helper: 2)."""
        now = time.perf_counter()
        self.done += 1
        if worked:
            self.worked, self.busy = self.worked + 1, self.busy + now - self.last
        self.last = now
        if not self.worked:
            return ""
        return rate(self.busy / self.worked / hands, self.total - self.done if left is None else left, self.unit)


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


COUNTED = re.compile(r"^(?:step |\[(?:\d+-)?)(\d+)/(\d+)\b")  # `step 36/360 ...`, `[7/360] ...`, `[1-7/360] ...`


class Throttle:
    """Which progress lines a log that is not a terminal gets: every line that is not a count
    (`step N/M`, `[N/M]`), and of the counts the first, the last, each that crosses another tenth
    of the total, and any that comes `every` seconds or more after the last one shown. So a long
    stage writes about ten lines in all, and between two of them at most `every` seconds pass plus
    one item's time (a model build's step: under a second; a laptop harvest's task: about 35 s),
    which keeps the gap under a minute."""

    def __init__(self, every: float = 30.0):
        self.every, self.shown_at, self.tenth = every, None, -1

    def due(self, message: str) -> bool:
        found = COUNTED.match(message)
        if found is None:
            return True
        done, total = int(found[1]), max(1, int(found[2]))
        now, tenth = time.perf_counter(), 10 * done // total
        if self.shown_at is None or done >= total or tenth > self.tenth or now - self.shown_at >= self.every:
            self.shown_at, self.tenth = now, tenth
            return True
        return False


def counted(desc: str, say: Callable[[str], None]) -> Callable[[int, int], None]:
    """A `progress(done, total)` callback for a loop that reports counts, not lines: `[done/total]
    desc` with the rate and time left, through `say` (a `Throttle` decides what a log gets)."""
    started, throttle = time.perf_counter(), Throttle()

    def progress(done: int, total: int) -> None:
        line = f"[{done}/{total}] {desc}"
        if done:
            line += rate((time.perf_counter() - started) / done, total - done)
        if throttle.due(line):
            say(line)
    return progress


def shown(prefix: str) -> Callable[[str], None]:
    """Progress lines on stderr as `  <prefix>: <line>`: every line in a terminal; where stderr is a
    pipe or a file, those a `Throttle` lets through."""
    terminal, throttle = sys.stderr.isatty(), Throttle()

    def show(line: str) -> None:
        if terminal or throttle.due(line):
            print(f"  {prefix}: {line}", file=sys.stderr, flush=True)
    return show


_pulse: Callable[[str], None] | None = None  # where a decoding batch's pulse goes; set by `pulsing`


@contextmanager
def pulsing(say: Callable[[str], None]) -> Iterator[None]:
    """Within it, a decoding batch's pulse (`Pulse`) goes to `say`: a stage whose one item is one
    long batch (a task of the registered 12,288-token allowance, a policy's evaluation) still shows
    progress through a log, not only between items."""
    global _pulse
    before, _pulse = _pulse, say
    try:
        yield
    finally:
        _pulse = before


class Pulse:
    """`decoding 18 rows: step 2,048/12,288, 1 open`, to the `pulsing` stage's `say`, at most once
    each `every` seconds and only from a batch that has run that long (nowhere outside `pulsing`)."""

    every = 30.0

    def __init__(self, rows: int, max_tokens: int):
        self.rows, self.max_tokens, self.last = rows, max_tokens, time.perf_counter()

    def __call__(self, step: int, open_rows: int) -> None:
        now = time.perf_counter()
        if _pulse is not None and now - self.last >= self.every:
            self.last = now
            _pulse(f"decoding {self.rows} rows: step {step:,}/{self.max_tokens:,}, {open_rows} open")
