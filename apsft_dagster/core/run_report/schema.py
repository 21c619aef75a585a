"""The typed shape of each file of a run folder (documented in `ingest.py`'s docstring)."""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class RunMeta(_Strict):
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    base_model: str = Field(min_length=1)
    platform: str = ""
    environment: str = ""
    started: str = ""
    completed: str = ""


class TrainingMeta(BaseModel):
    # a trainer's config carries many more keys than the report reads: keep them, check these
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    # required in training_config.toml (TOML has no null); None: an imported source does not record it
    steps: int | None = Field(gt=0)
    batch_size: int | None = Field(gt=0)
    rollouts_per_example: int | None = Field(gt=0)
    task_set: str = ""
    reward_mode: str = ""


class TrainingConfig(_Strict):
    run: RunMeta
    training: TrainingMeta


class Metric(_Strict):
    key: str = Field(min_length=1)
    label: str = Field(min_length=1)
    higher_is_better: bool = True


class EvalStep(_Strict):
    step: int = Field(ge=0)
    scores: dict[str, float | None]


class EvalSummary(_Strict):
    metrics: list[Metric] = Field(min_length=1)
    steps: list[EvalStep] = Field(min_length=1)


class RewardStep(_Strict):
    step: int = Field(ge=0)
    reward_mean: float


class TrainReward(_Strict):
    steps: list[RewardStep]


class UsageItem(_Strict):
    kind: str = Field(min_length=1)
    tokens: int = Field(ge=0)
    cost_usd: Decimal = Field(ge=0, strict=False)  # read as exact decimals: $1.8552 + $1.1554 is $3.0106


class Usage(_Strict):
    usage: list[UsageItem] = Field(min_length=1)


STATUS = r"^[A-Z][A-Z_]*$"  # the platform's status words: READY, UPLOADING, NOT_DEPLOYED, ...


class Checkpoint(_Strict):
    step: int = Field(ge=0)
    id: str = Field(min_length=1)
    status: str = Field(pattern=STATUS)
    size_bytes: int | None = Field(ge=0)


class Checkpoints(_Strict):
    checkpoints: list[Checkpoint]


class Adapter(_Strict):
    step: int | None = Field(ge=0)  # None: an adapter not tied to a saved step (the seed lists one)
    id: str = Field(min_length=1)
    status: str = Field(pattern=STATUS)
    deployment_status: str | None = Field(pattern=STATUS)  # None (JSON null): not recorded
    deployable: bool | None  # None (JSON null): not recorded, so no rule may read it as yes or no


class Adapters(_Strict):
    adapters: list[Adapter]


class Sample(_Strict):
    problem_id: int = Field(ge=0)
    prompt: str
    completion: str
    reward: float


class Rollouts(_Strict):
    step: int = Field(ge=0)
    samples: list[Sample] = Field(min_length=1)
