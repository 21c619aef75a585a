"""Where a run's engine stages compute: the optional `ray` section of a profile (apsft_dagster/workers/; its
model, `Ray`: core/config/sections/ray.py), and the variables that hand it to a run's stages.

Which devices compute a partition changes none of its bytes (each partition depends on that partition
alone, and each worker holds `compute.threads` threads), so like `gpu` the section stays out of the
config digest (`core/config/digest.py`, UNSEALED_SECTIONS): spreading a run over eight GPUs voids no receipt.
Absent, a run computes in its own process (beside, on a CPU with a core to spare, the second-core
helper of `workers/local.py`); `apsft run --ray [ADDRESS] [--devices N]` overrides it.
"""

from __future__ import annotations

ADDRESS_ENV = "RAY_ADDRESS"  # Ray's own variable: a cluster to join (`ray start --head` prints it)
DEVICES_ENV = "APSFT_RAY_DEVICES"  # how many workers a stage may use (the run hands it to its stages)
