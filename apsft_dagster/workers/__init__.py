"""Where an engine stage computes its independent partitions: the one entry the assets call, `share`.

Each partition's bytes depend on that partition alone (a task's shard, a policy's adapter or
generations), so any process may compute it. The step loops over its partitions in order and asks
the share for each (`result(key)`: None = compute it here; otherwise the result a worker made):

- on a Ray cluster (`apsft run --ray`, or a profile's `ray` section): a pool of engine workers, one
  per device, each loading its model once (workers/ray_pool.py, workers/cluster.py);
- otherwise, on a CPU with a core to spare, the second core's helper process (workers/local.py);
- otherwise none: the step computes every partition itself.

A stage names its worker once: `factory(experiment, **options) -> work(key) -> JSON-able result`, a
module-level function the worker process imports by name and builds its own resources with.
"""

from __future__ import annotations

from apsft_dagster.workers.cluster import target
from apsft_dagster.workers.local import STOCK, Share

__all__ = ["share"]


def share(name: str, factory, experiment, resource, options: dict | None = None, second_core: bool = True):
    """The partitions' pool for the step `name`; `resource` is the step's model-holding resource:
    a worker builds the project's own, so a step given another (a test's scripted engine) shares
    with nobody. `second_core=False`: no helper off Ray (a stage too short for one to pay)."""
    where = target(experiment.config())
    stock = type(resource).__module__.startswith(STOCK)
    if where is not None and stock:
        from apsft_dagster.workers.ray_pool import RayShare

        return RayShare(name, factory, experiment, options, where)
    return Share(name, factory, experiment, resource if second_core else None, options)
