"""The review points: the optional `review` section of a profile, read by `apsft run` (core/review.py).

Where a run stops for review changes no artifact, so like `gpu` it stays out of the config digest
(`core/config/digest.py`, UNSEALED_SECTIONS): adding a pause to a profile voids no receipt. Absent, a run
pauses only where `apsft run --pause-after` asks.
"""

from __future__ import annotations

from typing import Literal

from apsft_dagster.core.config.base import Strict

# the resume-only boundaries of the seed: after the evidence seal, and after selection (before training)
POINTS = ("seal", "selection")


class Review(Strict):
    """Where `apsft run` stops until `apsft run --resume` records who resumed and when."""

    pause_after: list[Literal[POINTS]] = []
