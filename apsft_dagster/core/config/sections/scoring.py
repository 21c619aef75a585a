"""The `scoring` section: the instrument that scores the trace bank, and its parity gate."""

from __future__ import annotations

from typing import Literal

from apsft_dagster.core.config.base import PosFloat, PosInt, Strict


class Scoring(Strict):
    instrument: Literal["reference", "fast"]
    parity_threshold: PosFloat
    calibration_traces: PosInt
    # what a failed gate does with `instrument: fast` (core/parity.py `scoring_instrument`): the reference scores
    # the bank, or the run stops; the fast instrument never scores after a failed gate
    on_failed_gate: Literal["reference", "stop"] = "reference"
    # the reference instrument's batching (core/instruments.py): null, one record per forward and no padding (the
    # registered instrument); a number, right-padded batches of at most that many tokens (smoke's project choice)
    reference_batch_tokens: PosInt | None = 8192
