"""The loss-mask curation's settings: the optional `loss_mask` section of a profile (core/loss_mask/settings.py
reads it)."""

from __future__ import annotations

from apsft_dagster.core.config.base import NonNegInt, PosInt, Strict


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
