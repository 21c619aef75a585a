"""The plan's throughput envelopes: the optional `plan` section of a profile, read by `apsft plan`.

It prices the run and changes no artifact, so it stays out of the config digest
(`core/config/digest.py`, UNSEALED_SECTIONS): recalibrating an envelope on a new machine invalidates no
receipt. Training's envelope is not here: `training.throughput_tokens_per_s` is the budget gate's,
sealed with the manifest, and the plan reads it there (`core/plan_settings.py`: the section, or a stop).
"""

from __future__ import annotations

from pydantic import model_validator

from apsft_dagster.core.config.base import PosFloat, Strict


class Envelope(Strict):
    """The range a rate or a duration is assumed to lie in on the profile's machine."""

    low: PosFloat
    high: PosFloat

    @model_validator(mode="after")
    def _ordered(self) -> Envelope:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
        return self


class Plan(Strict):
    """What one device does per second (or how long one unit takes), for the stages training's
    envelope does not price. A project assumption per profile until a rehearsal measures it."""

    # new tokens per second of the harvest.backend engine, requests batched as the stages batch
    # them: harvest, R1's answers, the deployment probe, Stage A and Stage B generations
    generation_tokens_per_s: Envelope
    # teacher-forced tokens per second of scoring.instrument: the parity gate, the score bank, and
    # R1's prefill of x + z + b (one forward pass over the same tokens)
    scoring_tokens_per_s: Envelope
    merge_seconds: Envelope  # one merge_snapshot of one policy, fingerprints included
    pretrain_step_seconds: Envelope | None = None  # one embedded pretraining step; null: no embedded build
    # one engine's model load onto a device, which `apsft plan --devices N` adds per worker (or per
    # partition where each loads its own model); null: loads not priced
    model_load_seconds: Envelope | None = None
