"""The loss-mask curation's settings: the optional `loss_mask` section of a profile (its model, `LossMask`:
core/config/sections/loss_mask.py)."""

from __future__ import annotations

from apsft_dagster.core.config import LossMask
from apsft_dagster.core.errors import ConfigError


def rule_settings(settings: LossMask) -> dict:
    """The masking rules' keyword arguments (census, build and verify use the same)."""
    return {"known_broken_families": frozenset(settings.known_broken_families),
            "prose_commands": None if settings.prose_commands is None else frozenset(settings.prose_commands)}


def loss_mask_settings(config) -> LossMask:
    """The profile's `loss_mask` section; a ConfigError naming the profile when it has none."""
    if config.loss_mask is None:
        raise ConfigError(f"profile {config.profile}: no loss_mask section, which the loss-mask curation needs; "
                          "copy the one in configs/smoke.yaml")
    return config.loss_mask
