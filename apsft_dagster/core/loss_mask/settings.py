"""The loss-mask curation's settings: the optional `loss_mask` section of a profile."""

from __future__ import annotations

from apsft_dagster.core.config_sections import NonNegInt, PosInt, Strict
from apsft_dagster.core.errors import ConfigError


class LossMask(Strict):
    """The loss-mask curation group, a sibling system: not part of the experiment's seal."""

    known_broken_families: list[str]  # verifier families whose failures are not trusted (false-claim rule)
    prose_commands: list[str] | None  # shell commands the prose-command rule knows; null: the rules' default list
    pack_length: PosInt
    shards: PosInt
    pack_seed: NonNegInt
    pack_window: PosInt = 1024  # input rows shuffled together before placement (pack_place.py); memory holds one
    workers: PosInt  # processes for the census and the build (ranges of one file; the result is byte-identical)
    demo_rows: PosInt  # rows of the generated dataset `apsft loss-mask demo` registers


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
