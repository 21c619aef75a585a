"""One engine worker on a Ray cluster: a process on one device that builds its stage's work once (the
interpreter, torch, the model: `factory(experiment, **options)`, as the second core's helper does)
and then computes the partitions the pool hands it, one at a time (workers/ray_pool.py). Kept free
of Ray at import, so the package imports where Ray is not installed."""

from __future__ import annotations

import importlib
import os
import socket


class EngineWorker:
    """Ray wraps this class (`ray.remote(**workers.cluster.worker_options(config))`)."""

    def __init__(self, factory: str, fields: dict, options: dict, env: dict[str, str]):
        os.environ.update(env)  # the run's switches (APSFT_RECOMPUTE, the model folder...) on any node
        from apsft_dagster.core.engines.memory import freeze_loaded
        from apsft_dagster.resources import ExperimentResource

        module, function = factory.split(":")
        self._work = getattr(importlib.import_module(module), function)(ExperimentResource(**fields), **options)
        freeze_loaded()  # the interpreter, torch and the model stay: collections walk only a partition's work
        import ray

        context = ray.get_runtime_context()
        gpus = ",".join(str(g) for g in ray.get_gpu_ids())  # Ray's CUDA_VISIBLE_DEVICES: this worker's device
        self._where = {"worker": context.get_actor_id()[:8], "node": context.get_node_id()[:8],
                       "host": socket.gethostname(), "pid": os.getpid(), **({"gpu": gpus} if gpus else {})}

    def ready(self) -> dict:
        """Where this worker runs (once built): its actor and node ids, host, process id and GPU."""
        return self._where

    def run(self, key: str) -> dict:
        """One partition's JSON-able result (its files are written through the store, atomically)."""
        return self._work(key)
