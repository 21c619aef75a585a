"""The `evaluation` section: each evaluation's allowance and its bootstrap."""

from __future__ import annotations

from apsft_dagster.core.config.base import PosInt, Strict, Unit


class Evaluation(Strict):
    allowance: PosInt
    bootstrap_resamples: PosInt
    confidence: Unit
