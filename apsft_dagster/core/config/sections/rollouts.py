"""The `rollouts` section: R1's answers after each candidate thought."""

from __future__ import annotations

from apsft_dagster.core.config.base import PosInt, Strict
from apsft_dagster.core.config.sections.harvest import Sampling


class Rollouts(Strict):
    sampling: Sampling
    max_new_tokens: PosInt
