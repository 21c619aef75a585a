"""`Config`: every section of a profile assembled (core/config/sections/), with the checks across sections, and the
digest that binds the sealed ones (core/config/digest.py). Loading a profile's YAML: core/config/load.py.
"""

from __future__ import annotations

from typing import Any

from pydantic import PrivateAttr, model_validator

from apsft_dagster.core.config.base import Strict
from apsft_dagster.core.config.digest import UNSEALED_SECTIONS, body_digest, late_defaults_dropped
from apsft_dagster.core.config.sections.compute import Compute
from apsft_dagster.core.config.sections.embedded import Embedded
from apsft_dagster.core.config.sections.evaluation import Evaluation
from apsft_dagster.core.config.sections.gpu import Gpu
from apsft_dagster.core.config.sections.harvest import Harvest
from apsft_dagster.core.config.sections.loss_mask import LossMask
from apsft_dagster.core.config.sections.merge import Merge
from apsft_dagster.core.config.sections.model import ARCHITECTURES, ModelSpec
from apsft_dagster.core.config.sections.plan import Plan
from apsft_dagster.core.config.sections.probe import Probe
from apsft_dagster.core.config.sections.protocol import Markers
from apsft_dagster.core.config.sections.ray import Ray
from apsft_dagster.core.config.sections.review import Review
from apsft_dagster.core.config.sections.rollouts import Rollouts
from apsft_dagster.core.config.sections.run_report import RunReport
from apsft_dagster.core.config.sections.scoring import Scoring
from apsft_dagster.core.config.sections.seeds import Seeds
from apsft_dagster.core.config.sections.selection import Selection
from apsft_dagster.core.config.sections.stage_b import StageB
from apsft_dagster.core.config.sections.tasks import Split, Tasks
from apsft_dagster.core.config.sections.training import Training
from apsft_dagster.core.config.sections.vllm import VLLM_CPU_HEAD_DIMS, Vllm
from apsft_dagster.core.errors import ConfigError
from apsft_dagster.core.splits import CONFIGURED, SPLIT_TABLE


class Config(Strict):
    profile: str
    seeds: Seeds
    tasks: Tasks
    model: ModelSpec
    protocol: Markers | None = None  # a local snapshot's text markers (core/text_protocol.py); absent: Qwen's
    compute: Compute
    embedded: Embedded | None = None
    harvest: Harvest
    vllm: Vllm
    scoring: Scoring
    rollouts: Rollouts
    selection: Selection
    training: Training
    merge: Merge
    probe: Probe
    evaluation: Evaluation
    stage_b: StageB
    # optional, never in the digest: the sibling systems' settings, the plan's envelopes, the GPU's kernel choice
    loss_mask: LossMask | None = None
    run_report: RunReport | None = None
    plan: Plan | None = None
    gpu: Gpu | None = None
    review: Review | None = None  # the review points `apsft run` pauses at (core/config/sections/review.py)
    ray: Ray | None = None  # the Ray cluster the engine stages fan out over (core/config/sections/ray.py)
    # a declared rehearsal: the registered profile it re-reads with changed thresholds (core/rehearsal.py)
    rehearsal: str | None = None
    _registered: Any = PrivateAttr(default=None)
    _task_file: Any = PrivateAttr(default=None)  # tasks.source, resolved and verified (core/task_file/source.py)

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        _check_tasks(self.tasks)
        if self.model.source == "embedded" and self.embedded is None:
            raise ValueError("embedded: required when model.source is 'embedded'")
        if self.model.source == "embedded" and self.model.architecture is None:
            raise ValueError("model.architecture: required when model.source is 'embedded' "
                             f"(one of {list(ARCHITECTURES)})")
        if self.model.source == "embedded" and self.protocol is not None:
            raise ValueError("protocol: only for model.source local; the embedded model writes core/protocol.py's "
                             "markers. Remove the section")
        if self.model.source == "local" and self.model.architecture is not None:
            raise ValueError("model.architecture: only for model.source embedded; a local snapshot's architecture is "
                             "read from its config.json. Remove the key")
        if self.model.architecture == "qwen3_5" and self.embedded is not None and (
                self.embedded.linear_attention is None or self.embedded.vision is None):
            raise ValueError("embedded.linear_attention and embedded.vision: required when model.architecture is "
                             "qwen3_5")
        if self.model.source == "local" and not self.model.path:
            raise ValueError("model.path: required when model.source is 'local'")
        if (self.harvest.inherited_index is None) != (self.harvest.inherited_index_sha256 is None):
            raise ValueError("harvest.inherited_index and harvest.inherited_index_sha256 go together")
        if self.harvest.backend == "vllm":
            self._check_vllm()
        if self.compute.device == "cpu" and self.compute.dtype != "float32":
            raise ValueError("compute.dtype: CPU runs in float32 (bfloat16 matmuls on CPU are slow and not the "
                             "reference)")
        if self.compute.quantization != "none" and self.compute.device != "cuda":
            raise ValueError("compute.quantization: nf4 needs compute.device cuda (bitsandbytes kernels)")
        if (envelope := self.training.throughput_tokens_per_s).low > envelope.high:
            raise ValueError(f"training.throughput_tokens_per_s: low ({envelope.low}) must not exceed high "
                             f"({envelope.high})")
        if self.stage_b.min_gain < 0 and self.rehearsal is None:
            raise ValueError(f"stage_b.min_gain: {self.stage_b.min_gain} is below 0 (a treatment that trails its "
                             "baseline would pass); only a declared rehearsal (`rehearsal: <profile>`) may")
        return self

    def _check_vllm(self) -> None:
        """What vLLM needs beyond the section's own ranges (checked on load whatever the backend)."""
        engine = self.vllm
        if self.compute.device != "cpu":
            return
        if engine.kv_cache_bytes is None:
            raise ValueError("vllm.kv_cache_bytes: required when harvest.backend is vllm on compute.device cpu "
                             "(e.g. 1073741824 for 1 GiB); without it vLLM reserves gpu_memory_utilization of all RAM")
        if self.embedded is not None and self.model.source == "embedded" \
                and self.embedded.head_dim not in VLLM_CPU_HEAD_DIMS:
            raise ValueError(f"embedded.head_dim: {self.embedded.head_dim} is not one vLLM's CPU attention backend "
                             f"supports {list(VLLM_CPU_HEAD_DIMS)}; pick one of those or set harvest.backend: "
                             "transformers")

    @property
    def digest(self) -> str:
        """SHA-256 of the canonical JSON form: the config's identity in the evidence seal (UNSEALED_SECTIONS,
        the sibling systems' sections, the plan's envelopes and the GPU's kernel choice, left out)."""
        return body_digest(self.digest_body)

    @property
    def digest_body(self) -> dict:
        """What `digest` hashes (the design anchor keeps it, to name each field changed since)."""
        unsealed = {*UNSEALED_SECTIONS, *(["rehearsal"] if self.rehearsal is None else [])}  # a registered profile's
        return late_defaults_dropped(self.model_dump(mode="json", exclude=unsealed))  # as before

    @property
    def registered(self) -> Config:
        """The registered profile whose Stage A this is: itself, or the one a rehearsal rehearses."""
        if self.rehearsal is None:
            return self
        if self._registered is None:
            raise ConfigError(f"profile {self.profile}: a rehearsal of {self.rehearsal!r} not bound to it; load "
                              "profiles with load_config")
        return self._registered

    @property
    def sealed_digest(self) -> str:
        """The digest Stage A's artifacts and the evidence seal bind (the registered profile's)."""
        return self.registered.digest

    @property
    def sealed_profile(self) -> str:
        return self.registered.profile


def _check_tasks(tasks: Tasks) -> None:
    """Each configured split's cells, and its families as the split table says (core/splits.py)."""
    for name in CONFIGURED:
        _check_split(f"tasks.{name}", getattr(tasks, name))
    train = set(tasks.train.families)
    for name in (s.name for s in SPLIT_TABLE if s.families == "held_out"):
        if train & set(getattr(tasks, name).families):
            raise ValueError(f"tasks.{name}.families must not share a family with tasks.train")
    for name in (s.name for s in SPLIT_TABLE if s.families == "train"):
        if set(getattr(tasks, name).families) != train:
            raise ValueError(f"tasks.{name}.families must equal tasks.train.families")


def _check_split(field: str, split: Split) -> None:
    for key in ("families", "levels"):  # the members themselves are checked by the model (the catalog's)
        values = getattr(split, key)
        if len(set(values)) != len(values):
            raise ValueError(f"{field}.{key}: {values} names one twice; list each once")
    cells = len(split.families) * len(split.levels)
    if cells * split.per_cell != split.total:
        raise ValueError(
            f"{field}.total is {split.total} but {len(split.families)} families x "
            f"{len(split.levels)} levels x per_cell {split.per_cell} = {cells * split.per_cell}"
        )

