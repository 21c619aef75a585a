"""Where a run's engine stages compute: the optional `ray` section of a profile (apsft_dagster/workers/).

Which devices compute a partition changes none of its bytes (each partition depends on that partition
alone, and each worker holds `compute.threads` threads), so like `gpu` the section stays out of the
config digest (`core/config/digest.py`, UNSEALED_SECTIONS): spreading a run over eight GPUs voids no receipt.
Absent, a run computes in its own process (beside, on a CPU with a core to spare, the second-core
helper of `workers/local.py`); `apsft run --ray [ADDRESS] [--devices N]` overrides it (core/ray_settings.py).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from apsft_dagster.core.config.base import Strict


class Ray(Strict):
    """A Ray cluster to fan the engine stages out over: one engine worker per device."""

    enabled: bool = True  # the section present means "on Ray"; false keeps the section and runs without
    # a cluster to join (`ray://host:10001`, `host:6379`, `auto`); null: RAY_ADDRESS, else a local cluster
    address: str | None = None
    # workers per engine stage: null = one per device the cluster has (GPUs on cuda; on cpu, its CPUs
    # divided by compute.threads); on a local cluster it is also how many devices the cluster gets
    devices: Annotated[int, Field(ge=1)] | None = None
