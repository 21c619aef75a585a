"""The `stage_b` section: Stage A's trigger thresholds and Stage B's samples."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from apsft_dagster.core.config.base import PosInt, Share, Strict


class StageB(Strict):
    min_gain: Annotated[float, Field(ge=-1, le=1)]  # a difference of two shares; below 0 only in a rehearsal
    min_lower_bound: Annotated[float, Field(ge=-1, lt=1)]  # a lower bound of a difference of two shares
    max_parse_rate_loss: Share
    max_family_macro_loss: Share
    k_samples: PosInt
