"""An engine stage's partitions on a pool of Ray workers, one per device (workers/cluster.py).

The same face as the second core's `Share` (workers/local.py), so an asset loops over its
partitions in order and asks `result(key)` for each: `expect(todo)` starts the workers at once
(each builds its model while the step does what comes first: a bank's key check, training's budget
gate), `open()` lets them take partitions, front first, one each until none are left. Results
arrive in any order; `result(key)` hands them back in the step's, so the step records each
partition as it would have computed it (receipts re-hashed). Each partition's bytes depend on that
partition alone, and each worker holds `compute.threads` threads: the bytes are the same on any
number of workers. A worker that dies (killed, its node lost) costs its unfinished partition only:
the pool gives it to another worker and starts a replacement (which Ray places where a device is
free); its half-written temp file is swept. A partition whose own code raises fails the step.
"""

from __future__ import annotations

import os
import time
import weakref
from collections import deque
from collections.abc import Sequence

from apsft_dagster.core.errors import ClusterError
from apsft_dagster.workers.cluster import Target, connect, require_devices, worker_options

ATTEMPTS = 3  # a partition whose worker died this often is not the workers' bad luck: the step fails
SAY_S = 30.0  # while waiting on workers: a line at once, then one each half minute
PASSED = ("APSFT_", "HF_", "TRANSFORMERS_", "DAGSTER_HOME")  # the environment a worker on another node needs


class RayShare:
    """A stage's pool of engine workers on Ray; see the module's docstring."""

    upfront = True  # a bank hands every partition over at once (the second core waits for the first's pace)

    def __init__(self, name: str, factory, experiment, options: dict | None, where: Target):
        from apsft_dagster.core.progress import shown

        self.name, self._experiment, self._where = name, experiment, where
        self._factory = f"{factory.__module__}:{factory.__qualname__}"
        self._options, self._config = options or {}, experiment.config()
        self._say, self._todo, self._queue = shown(f"{name} (ray)"), [], deque()
        self._results: dict[str, dict] = {}
        self._placed: dict[str, dict] = {}
        self._busy: dict = {}  # run ref -> (worker, key)
        self._starting: dict = {}  # ready ref -> worker
        self._idle, self._where_of, self._attempts = [], {}, {}
        self._opened, self._address, self._wanted, self._wait = False, None, 0, None
        self._all: list = []  # every worker started: stopped when the pool goes, even on a failed step
        weakref.finalize(self, _stop, self._all)

    def expect(self, todo: Sequence[str]) -> RayShare:
        """The partitions to compute, in the step's order: the workers start now (warm)."""
        self._todo = list(todo)
        if self._todo and self._address is None:
            self._address = connect(self._config, self._where)
            room = require_devices(self._config, self._address)
            self._wanted = min(self._where.devices or room, len(self._todo))
            for _ in range(self._wanted):
                self._start()
            self._say(f"{len(self._todo)} partitions on {self._wanted} workers (cluster {self._address}, "
                      f"room for {room})")
        return self

    def expect_after(self, seconds: float, rest: Sequence[str]) -> RayShare:
        return self.expect(rest)

    def open(self) -> RayShare:
        """The workers may take partitions, front first."""
        if not self._opened:
            self._opened = True
            self._queue.extend(self._todo)
            self._dispatch()
        return self

    def pace(self) -> tuple[int, int] | tuple[()]:
        """(partitions not yet handed out, workers at work), for the step's time left."""
        return (len(self._queue), max(1, len(self._busy))) if self._opened else ()

    def placed(self, key: str) -> dict:
        """Which worker computed `key`, on which node (the partition's metadata); {} if the step did."""
        return self._placed.get(key, {})

    def result(self, key: str) -> dict | None:
        """None: `key` is not the pool's (the step keeps or computes it). Otherwise its result,
        waiting while the workers compute (and handing out the rest as they free up)."""
        if key not in self._todo:
            return None
        self.open()
        quiet_since = time.monotonic()
        while key not in self._results:
            if self._pump():
                quiet_since = time.monotonic()
                if self._wait is not None and self._where_of and (ended := self._wait.ended(time.time())):
                    self._say(ended)
                    self._wait = None
            elif (line := self._unplaced()) is not None:
                self._say(line)
            elif time.monotonic() - quiet_since >= SAY_S:
                self._say(self._waiting_line(key))
                quiet_since = time.monotonic()
        if len(self._results) == len(self._todo):
            self.close()
        return self._results[key]

    def close(self) -> None:
        """Stop every worker (the next stage's model wants the devices)."""
        _stop(self._all)
        self._idle, self._starting, self._busy = [], {}, {}

    def _start(self) -> None:
        import ray

        from apsft_dagster.workers.ray_worker import EngineWorker

        fields = {f: getattr(self._experiment, f)
                  for f in ("profile", "config_path", "store_dir", "definitions_digest")}
        env = {k: v for k, v in os.environ.items() if k.startswith(PASSED)}
        worker = ray.remote(**worker_options(self._config))(EngineWorker).remote(
            self._factory, fields, self._options, env)
        self._starting[worker.ready.remote()] = worker
        self._all.append(worker)

    def _dispatch(self) -> None:
        while self._opened and self._idle and self._queue:
            worker, key = self._idle.pop(), self._queue.popleft()
            self._busy[worker.run.remote(key)] = (worker, key)

    def _pump(self) -> bool:
        """Wait up to a second for one worker to be built or one partition to finish; True if one did."""
        import ray

        refs = [*self._starting, *self._busy]
        if not refs:
            raise ClusterError(f"{self.name}: no Ray worker left and {len(self._queue)} partitions to compute")
        done, _ = ray.wait(refs, num_returns=1, timeout=1.0)
        for ref in done:
            if ref in self._starting:
                self._built(ref)
            else:
                self._finished(ref)
        self._dispatch()
        return bool(done)

    def _built(self, ref) -> None:
        import ray
        from ray.exceptions import RayActorError

        worker = self._starting.pop(ref)
        try:
            self._where_of[worker] = ray.get(ref)
        except RayActorError as exc:
            if exc.actor_init_failed:  # the stage's own code could not build its work: so would every worker
                self.close()
                kind, _, said = str(exc).strip().splitlines()[-1].partition(": ")
                cause = f"{kind.rsplit('.', 1)[-1]}: {said}"  # `MissingArtifactError: <file>: ...`
                raise ClusterError(f"{self.name}: an engine worker could not build its work: {cause}") from None
            self._start()  # died while loading (its node went): another takes its place
            return
        self._idle.append(worker)

    def _finished(self, ref) -> None:
        import ray
        from ray.exceptions import RayActorError

        worker, key = self._busy.pop(ref)
        try:
            result = ray.get(ref)
        except RayActorError:
            self._lost(worker, key)
            return
        except ray.exceptions.RayTaskError as exc:  # the partition's own code raised: the step fails, as in one process
            self.close()
            raise exc.as_instanceof_cause() from None
        self._results[key], self._placed[key] = result, self._where_of[worker]
        self._idle.append(worker)

    def _lost(self, worker, key: str) -> None:
        """A worker died mid-partition: its temp file goes, the partition goes back to the front of the
        queue, and a replacement starts."""
        self._attempts[key] = self._attempts.get(key, 0) + 1
        if self._attempts[key] >= ATTEMPTS:
            raise ClusterError(f"{self.name}: partition {key} lost its worker {ATTEMPTS} times; see the Ray "
                               "logs (/tmp/ray/session_latest/logs) for why the workers died")
        where = self._where_of.pop(worker, {})
        self._say(f"{key}: worker {where.get('worker')} on {where.get('host')} died; "
                  "the partition goes to another worker")
        from apsft_dagster.core.paths import profile_store

        _sweep_temps(self._experiment.store_dir or str(profile_store(self._config.profile)), where.get("pid"))
        self._queue.appendleft(key)
        self._start()

    def _unplaced(self) -> str | None:
        """While no worker computes and Ray has no free device for the ones starting: a line at once,
        then each half minute (core/waiting.py); None otherwise."""
        import ray

        from apsft_dagster.core.waiting import Waiting
        from apsft_dagster.workers.cluster import device_kind, worker_need

        kind = device_kind(self._config)
        if (self._busy or self._idle or not self._starting
                or ray.available_resources().get(kind, 0) >= worker_need(self._config)):
            return None
        if self._wait is None:
            self._wait = Waiting(f"a {kind} from Ray for {len(self._starting)} workers (the cluster's "
                                 f"{ray.cluster_resources().get(kind, 0):g} are held by other work)", time.time())
        return self._wait.tick(time.time())

    def _waiting_line(self, key: str) -> str:
        started = len(self._where_of)
        pending = len(self._starting)
        line = f"waiting for {key}: {len(self._results)}/{len(self._todo)} done, {len(self._busy)} computing"
        if pending:
            line += f", {pending} of {started + pending} workers waiting for Ray to place them on a device"
        return line


def _sweep_temps(store_dir: str | None, pid: int | None) -> None:
    """A dead worker's temp siblings in a local store (core/leftovers.py names them by process id)."""
    if not store_dir or pid is None or "://" in str(store_dir):
        return
    from pathlib import Path

    from apsft_dagster.core.leftovers import TEMP

    for path in Path(store_dir).rglob(f".*-{pid}"):
        if TEMP.match(path.name) and path.is_file():
            path.unlink(missing_ok=True)


def _stop(workers: list) -> None:
    import ray

    if ray.is_initialized():
        for worker in workers:
            ray.kill(worker)
    workers.clear()
