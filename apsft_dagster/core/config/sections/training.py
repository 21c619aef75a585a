"""The `training` section: the LoRA adapters, the loss weights and the budget gate's envelope."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from apsft_dagster.core.config.base import NonNegFloat, NonNegInt, PosFloat, PosInt, Strict


class Lora(Strict):
    rank: PosInt
    alpha: PosInt
    dropout: Annotated[float, Field(ge=0, lt=1)]


class LossWeights(Strict):
    prompt: NonNegFloat
    thought: NonNegFloat
    answer: NonNegFloat


class Throughput(Strict):
    """Training tokens per second per device, low and high: the manifest's device-hour envelope."""

    low: PosFloat
    high: PosFloat


class Training(Strict):
    lora: Lora
    # Every linear projection of the decoder blocks, per architecture (config.json's model_type);
    # checked against the loaded model's module names before any adapter is created.
    target_modules: dict[str, list[str]]
    epochs: PosInt
    learning_rate: PosFloat
    batch_size: Literal[1]  # records are never packed or batched together (batch 1 x grad_accum)
    grad_accum: PosInt
    max_length: PosInt
    max_grad_norm: PosFloat
    loss_weights: LossWeights
    loss_chunk_tokens: PosInt  # positions per LM-head chunk: full-vocabulary logits never exist for a whole record
    gradient_checkpointing: bool
    checkpoint_every: PosInt  # optimizer steps between resumable checkpoints
    throughput_tokens_per_s: Throughput
    budget_device_hours: PosFloat  # the whole training matrix; only a dated amendment raises it
    warmup_records: NonNegInt  # records timed before the first step to measure throughput (0: use the envelope)
