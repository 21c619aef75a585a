"""The plan's throughput envelopes: the optional `plan` section of a profile, read by `apsft plan`.

It prices the run and changes no artifact, so it stays out of the config digest
(`core/config/digest.py`, UNSEALED_SECTIONS): recalibrating an envelope on a new machine invalidates no
receipt. Training's envelope is not here: `training.throughput_tokens_per_s` is the budget gate's,
sealed with the manifest, and the plan reads it there. The section's models (`Plan`, `Envelope`):
core/config/sections/plan.py.
"""

from __future__ import annotations

from apsft_dagster.core.config import Plan
from apsft_dagster.core.errors import ConfigError


def plan_settings(config) -> Plan:
    """The profile's `plan` section; a ConfigError naming the profile when it has none."""
    if config.plan is None:
        raise ConfigError(f"profile {config.profile}: no plan section, which `apsft plan` needs to price the stages; "
                          "copy the one in configs/full.yaml (a GPU) or configs/smoke.yaml (a CPU) and adjust it")
    return config.plan
