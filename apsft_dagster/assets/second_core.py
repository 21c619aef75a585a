"""The machine's second core for a model-holding step whose partitions are independent.

A profile that pins one torch thread (`compute.threads: 1`: smoke, laptop) leaves a core idle. A
second thread is no cure: beside a busy core a two-thread process stalls (6.5x slower,
docs/timings.md), and the thread count is part of what a CPU result depends on. Instead a step
whose partitions are independent (each partition's bytes depend on that partition alone: the
harvest's, scoring's and R1's task shards, Stage A's and Stage B's per-policy generations, each
policy's adapter) hands the later half of the partitions it must compute to one helper: a process
of its own, pinned to the same one thread, computing through the same store (atomic writes, so a
kill leaves nothing half-written) and reporting each finished partition in a JSON line. The step
computes the first half meanwhile, then records every partition in order (receipts re-hashed), as
if it had computed them all; any partition the helper did not finish (it died, it was killed) the
step computes itself. The bytes are the same either way: the suite computes the partitions
command 1's helpers made again in its own process (test_materialize.py says which tests).

Not used where the device is the bottleneck (`compute.device` other than cpu: one engine per node,
the `gpu` pool), where the pinned threads already fill the cores (full_cpu: 2 of 2), on vLLM's CPU
engine (its own thread pool and memory reservation; not tried with two at once), or with
`APSFT_SECOND_CORE=off`.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from apsft_dagster.core.leftovers import alive

SWITCH = "APSFT_SECOND_CORE"  # `off`: every partition in the step's own process
STOCK = "apsft_dagster.resources."  # the resources a helper builds for itself
PREFIX = "apsft-second-core-"  # + the step's process id: a folder whose process is gone is swept
WORTH_S = 15.0  # a helper starts once the half it would take is worth this many seconds
WARM_WORTH_S = 2.0  # a warm helper, loaded and waiting, is given the half once it is worth this many


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def wanted(config) -> bool:
    """Whether a step of this config hands partitions to a helper (see the module's docstring)."""
    return (os.environ.get(SWITCH, "on") != "off" and config.compute.device == "cpu"
            and config.harvest.backend == "transformers" and cores() >= 2 * config.compute.threads)


T = TypeVar("T")
Factory = Callable[..., Callable[[str], dict]]  # factory(experiment, **options) -> work(key) -> a JSON-able result


class Helper:
    """A helper process computing `keys` with `factory(experiment, **options)` (a module-level
    function, which the helper imports by name; `options` JSON-able, e.g. a resource's settings);
    `result(key)` waits for it. `name` marks its progress lines. With `keys` None it starts warm:
    it builds its worker (interpreter, torch, the model), says it is `ready`, and waits for `give`."""

    def __init__(self, name: str, factory: Factory, experiment, keys: Sequence[str] | None,
                 options: dict | None = None):
        self.keys, self.name = list(keys or ()), name
        sweep_folders()
        self._dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
        fields = {field: getattr(experiment, field) for field in ("profile", "config_path", "store_dir",
                                                                   "definitions_digest")}
        cmd = [sys.executable, "-m", "apsft_dagster.assets.second_core", name,
               f"{factory.__module__}:{factory.__qualname__}", json.dumps(fields), json.dumps(options or {}),
               "-" if keys is None else json.dumps(self.keys),
               str(self._dir / "results.jsonl"), str(os.getpid())]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                      stdin=subprocess.PIPE if keys is None else None, text=True)
        self._results: dict[str, dict] | None = None
        self.exit_code: int | None = None
        # its folder goes once read; a step that fails before reading it: the helper stops, the folder goes
        self._discard = weakref.finalize(self, _discard, self._proc, self._dir)

    def owns(self, key: str) -> bool:
        return key in self.keys

    def ready(self) -> bool:
        """A warm helper has built its worker and waits for its keys."""
        return (self._dir / "ready").exists()

    def give(self, keys: Sequence[str]) -> None:
        """A warm helper's keys (once): it computes them and exits."""
        self.keys = list(keys)
        try:
            self._proc.stdin.write(json.dumps(self.keys) + "\n")
            self._proc.stdin.close()
        except OSError:  # it died: `result` finds none of them, and the step computes them itself
            pass

    def result(self, key: str) -> dict | None:
        """The helper's result for `key`, once the helper has exited; None when it did not finish
        that key (the step then computes it itself)."""
        if self._results is None:
            self.exit_code = self._proc.wait()
            self._results = _read(self._dir / "results.jsonl")
            self._discard()
        return self._results.get(key)

    def missed(self) -> list[str]:
        """The keys the helper was given and did not report (after `result`)."""
        return [k for k in self.keys if k not in (self._results or {})]


class Share:
    """A step's loop and, once it pays, a helper: after each partition the step computes itself,
    `computed(seconds, left)` gives a helper the later half of `left` (the partitions still to
    compute, in the loop's order) when that half is worth enough at the fastest partition so far
    (the first carries the model's load). A step that knows it has two or more partitions to compute
    says so first (`expect`): a helper then starts at once, warm, building its worker on the idle
    core while the step computes, and is given the later half once it is `ready` and that half is
    worth `WARM_WORTH_S`; one never given is stopped with the step. Otherwise a helper starts cold, with
    its half, once that half is worth `WORTH_S` (it costs about 6 s to start: interpreter, torch,
    the model). `resource` is the step's model-holding resource: the helper builds the project's
    own, so a step given another (a test's scripted engine, a subclass) never shares."""

    def __init__(self, name: str, factory: Factory, experiment, resource, options: dict | None = None):
        self._args, self.helper, self.fastest = (name, factory, experiment), None, None
        self._options = options
        self._on = wanted(experiment.config()) and type(resource).__module__.startswith(STOCK)

    def expect(self, count: int) -> Share:
        """`count` partitions to compute: with two or more, a warm helper starts now."""
        if self._on and self.helper is None and count >= 2:
            self.helper = Helper(*self._args, None, self._options)
        return self

    def owns(self, key: str) -> bool:
        return self.helper is not None and self.helper.owns(key)

    def result(self, key: str) -> dict | None:
        return self.helper.result(key) if self.owns(key) else None

    def run(self, compute: Callable[[], T], left: Sequence[str]) -> T:
        """`compute()` in the step's own process, timed for `computed`."""
        started = time.perf_counter()
        out = compute()
        self.computed(time.perf_counter() - started, left)
        return out

    def computed(self, seconds: float, left: Sequence[str]) -> None:
        if not self._on or (self.helper is not None and self.helper.keys):
            return
        self.fastest = seconds if self.fastest is None else min(self.fastest, seconds)
        theirs = list(left)[(len(left) + 1) // 2:]  # rounded down: a helper's first partition is its slowest
        if not theirs:
            return
        if self.helper is None and self.fastest * len(theirs) >= WORTH_S:
            self.helper = Helper(*self._args, theirs, self._options)
        elif self.helper is not None and self.helper.ready() and self.fastest * len(theirs) >= WARM_WORTH_S:
            self.helper.give(theirs)


def _discard(proc: subprocess.Popen, folder: Path) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    shutil.rmtree(folder, ignore_errors=True)


def sweep_folders() -> list[Path]:
    """Remove the folders `dead_folders` finds; returns them."""
    gone = dead_folders()
    for folder in gone:
        shutil.rmtree(folder, ignore_errors=True)
    return gone


def dead_folders() -> list[Path]:
    """The folders of helpers whose step's process is gone (killed: no finalizer ran)."""
    return [folder for folder in sorted(Path(tempfile.gettempdir()).glob(f"{PREFIX}*-*"))
            if (pid := folder.name[len(PREFIX):].split("-")[0]).isdigit() and not alive(int(pid))]


def _read(path: Path) -> dict[str, dict]:
    found = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a kill
                continue
            found[entry["key"]] = entry["result"]
    return found


def _die_with_parent(parent: int) -> None:
    """SIGKILL this helper when the step's process dies (Linux), so a killed run leaves no orphan."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)


def say(name: str) -> Callable[[str], None]:
    """A helper's progress lines on stderr, marked as the second core's (`core.progress.shown`)."""
    from apsft_dagster.core.progress import shown

    return shown(f"{name} (second core)")


def main(argv: Sequence[str] | None = None) -> int:
    """Helper entry: compute each key with the worker, appending `{"key", "result"}` lines."""
    from apsft_dagster.core.progress import Pace
    from apsft_dagster.resources import ExperimentResource

    name, factory, fields, options, keys, results, parent = list(sys.argv[1:] if argv is None else argv)
    _die_with_parent(int(parent))
    module, function = factory.split(":")
    work: Callable[[str], dict] = getattr(importlib.import_module(module), function)(
        ExperimentResource(**json.loads(fields)), **json.loads(options))
    if keys == "-":  # warm: ready, then the keys arrive on stdin (none: the step did not need it)
        Path(results).with_name("ready").touch()
        keys = sys.stdin.readline() or "[]"
    keys, show = json.loads(keys), say(name)
    pace = Pace(len(keys))
    with open(results, "a", encoding="utf-8") as out:
        for i, key in enumerate(keys):
            out.write(json.dumps({"key": key, "result": work(key)}) + "\n")  # key order kept: the metadata's
            out.flush()
            show(f"[{i + 1}/{len(keys)}] {key}: done{pace.step(True)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
