"""The machine's second core for a model-holding step whose partitions are independent.

A profile that pins one torch thread (`compute.threads: 1`: smoke, laptop) leaves a core idle. A
second thread is no cure: beside a busy core a two-thread process stalls (6.5x slower,
docs/timings.md), and the thread count is part of what a CPU result depends on. Instead a step
whose partitions are independent (each partition's bytes depend on that partition alone: the
harvest's, scoring's and R1's task shards, Stage A's and Stage B's per-policy generations, each
policy's adapter) shares the partitions it must compute with one helper: a process of its own,
pinned to the same one thread, computing through the same store (atomic writes, so a kill leaves
nothing half-written) and reporting each finished partition in a JSON line. The step takes
partitions from the front, the helper from the back, each claiming one before computing it (an
exclusive file create), so they meet where their work balances. The step then records every
partition in order (receipts re-hashed), as if it had computed them all; any partition the helper
claimed and did not finish (it died, it was killed) the step computes itself. The bytes are the
same either way: the suite computes the partitions command 1's helpers made again in its own
process (test_materialize.py says which tests).

Not used where the device is the bottleneck (`compute.device` other than cpu: one engine per node,
the `gpu` pool), where the pinned threads already fill the cores (full_cpu: 2 of 2), on vLLM's CPU
engine (its own thread pool and memory reservation; not tried with two at once), or with
`APSFT_SECOND_CORE=off`. While its helper lives the step is pinned to one core and the helper to
another (`pin_apart`; `APSFT_PIN=off`: both float), so a busy process beside them cannot leave
them sharing one core.
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

from apsft_dagster.core.engines.memory import freeze_loaded
from apsft_dagster.core.leftovers import alive
from apsft_dagster.workers import pinning
from apsft_dagster.workers.pinning import pin_apart, unpin

WORTH_S = 12.0  # a helper costs about 6 s of the idle core to load: a bank's must be able to save twice that
SWITCH = "APSFT_SECOND_CORE"  # `off`: every partition in the step's own process
STOCK = "apsft_dagster.resources."  # the resources a helper builds for itself
PREFIX = "apsft-second-core-"  # + the step's process id: a folder whose process is gone is swept


def cores() -> int:
    """The cores this process may use (those it had before `pin_apart` pinned it beside its helper)."""
    if (held := pinning.held()) is not None:
        return len(held)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def wanted(config) -> bool:
    """Whether a step of this config hands partitions to a helper (see the module's docstring)."""
    return (os.environ.get(SWITCH, "on") != "off" and config.compute.device == "cpu"
            and config.harvest.backend == "transformers" and cores() >= 2 * config.compute.threads)


Factory = Callable[..., Callable[[str], dict]]  # factory(experiment, **options) -> work(key) -> a JSON-able result


class Helper:
    """A helper process computing partitions with `factory(experiment, **options)` (a module-level
    function, which the helper imports by name; `options` JSON-able, e.g. a resource's settings). It
    starts warm: it builds its worker (interpreter, torch, the model), says it is `ready`, and waits
    for `give(keys)`; then it claims keys from the back (`claim`) while the step claims from the
    front (`take`), until it meets one the step holds. `name` marks its progress lines."""

    def __init__(self, name: str, factory: Factory, experiment, options: dict | None = None):
        self.keys, self.name = [], name
        sweep_folders()
        self._dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
        (self._dir / "claims").mkdir()
        fields = {field: getattr(experiment, field) for field in ("profile", "config_path", "store_dir",
                                                                   "definitions_digest")}
        cmd = [sys.executable, "-m", "apsft_dagster.workers.local", name,
               f"{factory.__module__}:{factory.__qualname__}", json.dumps(fields), json.dumps(options or {}),
               str(self._dir / "results.jsonl"), str(os.getpid())]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stdin=subprocess.PIPE, text=True)
        pinned = pin_apart(self._proc.pid)
        self._results: dict[str, dict] | None = None
        self._claimed: list[str] = []
        self._mine: set[str] = set()  # the keys the step claimed
        self.exit_code: int | None = None
        # its folder goes once read; a step that fails before reading it: the helper stops, the folder goes
        self._discard = weakref.finalize(self, _discard, self._proc, self._dir, pinned)

    def ready(self) -> bool:
        """The helper has built its worker and waits for its keys (or claims them, once given)."""
        return (self._dir / "ready").exists()

    def give(self, keys: Sequence[str]) -> None:
        """The partitions to compute, in the step's order (once): the helper claims them from the back."""
        self.keys = list(keys)
        try:
            self._proc.stdin.write(json.dumps(self.keys) + "\n")
            self._proc.stdin.close()
        except OSError:  # it died: `take` wins every key, and the step computes them itself
            pass

    def take(self, key: str) -> bool:
        """The step claims `key`: True when it is the step's to compute (not given, or not yet
        claimed by the helper), False when the helper holds it (then `result`)."""
        if self._results is not None:  # it has exited: what it reported is its, the rest the step's
            return key not in self._results
        if key not in self.keys:
            return True
        if claim(self._dir / "claims", self.keys.index(key)):
            self._mine.add(key)
            return True
        return False

    def result(self, key: str) -> dict | None:
        """The helper's result for `key`, once the helper has exited (it stops at the first key the
        step holds); None when it did not finish that key (the step then computes it itself)."""
        if self._results is None:
            self.exit_code = self._proc.wait()
            self._results, self._claimed = _read(self._dir / "results.jsonl"), self.claimed
            self._discard()
        return self._results.get(key)

    def missed(self) -> list[str]:
        """The keys the helper claimed and did not report (after `result`)."""
        return [k for k in self.claimed if k not in self._mine and k not in (self._results or {})]

    @property
    def claimed(self) -> list[str]:
        """The keys claimed so far, by either side, in the step's order."""
        if self._results is not None:  # its folder is gone: as they were when it exited
            return self._claimed
        folder = self._dir / "claims"
        return [k for i, k in enumerate(self.keys) if (folder / str(i)).exists()]


def claim(folder: Path, index: int) -> bool:
    """Claim partition `index` (an exclusive create: of the step and its helper, exactly one wins)."""
    try:
        os.close(os.open(folder / str(index), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class Share:
    """A step's loop over its independent partitions and, where a core is spare (`wanted`), one
    helper that takes them from the other end. `expect(todo)` names the partitions the step must
    compute, in its order: with two or more, a helper starts at once, warm, building its worker on
    the idle core (about 6 s: interpreter, torch, the model); a bank, whose partitions' cost is
    unknown up front, calls `expect_after` once its first partition is made. `open()` lets it work (training opens
    once the budget gate has passed; a bank at once): from then on, before each partition the step
    asks `result(key)`: None means the step claimed it and computes it itself; otherwise the
    helper held it and this is its result (the step waits for the helper, which stops at the first
    key the step holds). The two meet where their work balances, within one partition, however
    long the helper took to load; a helper that finds every partition claimed stops, having cost
    only the idle core. `resource` is the
    step's model-holding resource: the helper builds the project's own, so a step given another (a
    test's scripted engine, a subclass) never shares."""

    upfront = False  # a bank's partitions reach the helper once its first says they are worth it (`expect_after`)

    def __init__(self, name: str, factory: Factory, experiment, resource, options: dict | None = None):
        self._args, self.helper, self._todo, self._helped = (name, factory, experiment), None, [], set()
        self._options = options
        self._on = wanted(experiment.config()) and type(resource).__module__.startswith(STOCK)

    def expect(self, todo: Sequence[str]) -> Share:
        """The partitions to compute, in the loop's order: with two or more, a warm helper starts now."""
        self._todo = list(todo)
        if self._on and self.helper is None and len(self._todo) >= 2:
            self.helper = Helper(*self._args, self._options)
        return self

    def expect_after(self, seconds: float, rest: Sequence[str]) -> Share:
        """A bank's way in (its partitions' cost is unknown up front): after its first partition took
        `seconds`, `expect(rest)` if the rest at that pace is worth `WORTH_S` (smoke's scoring and R1,
        about 0.2 s a task, are not; its harvest, 4 s, is)."""
        return self.expect(rest) if seconds * len(rest) >= WORTH_S else self

    def open(self) -> Share:
        """The helper may start claiming (from the back) once it is ready."""
        if self.helper is not None and not self.helper.keys:
            self.helper.give(self._todo)
        return self

    def pace(self) -> tuple[int, int] | tuple[()]:
        """(partitions nobody has claimed yet, hands at work on them: 2 while the helper computes),
        for the step's time left (`core.progress.Pace.step`); () when no helper was opened."""
        helper = self.helper
        if helper is None or not helper.keys:
            return ()
        working = helper.ready() and helper._results is None and helper._proc.poll() is None
        return len(helper.keys) - len(helper.claimed), 2 if working else 1

    def result(self, key: str) -> dict | None:
        """None: `key` is the step's to compute. Otherwise the helper's result for it."""
        if self.helper is None or not self.helper.keys or self.helper.take(key):
            return None
        if (got := self.helper.result(key)) is not None:
            self._helped.add(key)
        return got

    def close(self) -> None:
        """Stop the helper now (a step that fails before reading it)."""
        if self.helper is not None:
            self.helper._discard()

    def placed(self, key: str) -> dict:
        """Who computed `key` (the partition's metadata): {"worker": "second core"}, or {} for the step."""
        return {"worker": "second core", "pid": self.helper._proc.pid} if key in self._helped else {}


def _discard(proc: subprocess.Popen, folder: Path, pinned: set[int] | None = None) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    unpin(pinned)
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
    from apsft_dagster.resources import ExperimentResource

    name, factory, fields, options, results, parent = list(sys.argv[1:] if argv is None else argv)
    _die_with_parent(int(parent))
    module, function = factory.split(":")
    work: Callable[[str], dict] = getattr(importlib.import_module(module), function)(
        ExperimentResource(**json.loads(fields)), **json.loads(options))
    freeze_loaded()  # the interpreter, torch and the model stay: collections walk only a partition's work
    Path(results).with_name("ready").touch()
    keys = json.loads(sys.stdin.readline() or "[]")  # none: the step never opened it
    claims, show, started, done = Path(results).with_name("claims"), say(name), time.perf_counter(), 0
    with open(results, "a", encoding="utf-8") as out:
        for index in reversed(range(len(keys))):  # from the back, until the step holds one
            if not claim(claims, index):
                break
            out.write(json.dumps({"key": keys[index], "result": work(keys[index])}) + "\n")
            out.flush()
            done += 1
            per = (time.perf_counter() - started) / done
            show(f"[{index + 1}/{len(keys)}] {keys[index]}: done · {60 / per:.1f}/min, {done} so far")
    return 0

if __name__ == "__main__":
    sys.exit(main())
