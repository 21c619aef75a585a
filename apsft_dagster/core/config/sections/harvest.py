"""The `harvest` section: the trace bank's generation, with its sampling and loop thresholds
(`Sampling` is `rollouts.sampling`'s too)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from apsft_dagster.core.config.base import NonNegFloat, NonNegInt, PosInt, Strict


class Sampling(Strict):
    temperature: NonNegFloat
    top_p: Annotated[float, Field(gt=0, le=1)]
    top_k: NonNegInt


class LoopThresholds(Strict):
    min_repeats: Annotated[int, Field(ge=2)]
    max_period: PosInt
    min_span: PosInt


class Harvest(Strict):
    backend: Literal["transformers", "vllm"]
    inherited_index: str | None  # an exported bank's index.json to import before generating
    inherited_index_sha256: str | None  # the digest that index must have (recorded in advance)
    samples_per_task: PosInt
    sampling: Sampling
    allowance: PosInt
    continuation: NonNegInt
    record_limit: PosInt
    topup_batches: NonNegInt
    topup_size: NonNegInt
    min_eligible: NonNegInt
    loop: LoopThresholds
