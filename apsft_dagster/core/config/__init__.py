"""The one typed config: YAML profiles (`smoke`, `full`), validated on load, with a canonical digest.

This face keeps every name importable from `apsft_dagster.core.config`. Each section's model is in
`sections/<key>.py` (the sibling systems' `loss_mask` and `run_report` too), `Config` and its checks across
sections in `schema.py`, the digest in `digest.py`, loading a profile (YAML, `extends:`, a declared rehearsal) in
`load.py`, and the shared field types in `base.py`. Importing it loads no builder (core/tasks/) and no sibling core:
`KNOWN_FAMILIES` and `KNOWN_LEVELS` read the builders' registry when asked for.
"""

from __future__ import annotations

from apsft_dagster.core.config.base import NonNegFloat, NonNegInt, PosFloat, PosInt, Share, Strict, Unit
from apsft_dagster.core.config.digest import (
    LATE_FIELDS,
    SIBLING_SECTIONS,
    UNSEALED_SECTIONS,
    body_digest,
    canonical_json,
    late_defaults_dropped,
)
from apsft_dagster.core.config.load import SAFE_LOADER, load_config, profile_file, read_profile, resolve_config_path
from apsft_dagster.core.config.schema import Config
from apsft_dagster.core.config.sections.compute import Compute
from apsft_dagster.core.config.sections.embedded import Embedded, LinearAttention, Vision
from apsft_dagster.core.config.sections.evaluation import Evaluation
from apsft_dagster.core.config.sections.gpu import Gpu
from apsft_dagster.core.config.sections.harvest import Harvest, LoopThresholds, Sampling
from apsft_dagster.core.config.sections.loss_mask import LossMask
from apsft_dagster.core.config.sections.merge import Merge
from apsft_dagster.core.config.sections.model import ARCHITECTURES, ModelSpec
from apsft_dagster.core.config.sections.plan import Envelope, Plan
from apsft_dagster.core.config.sections.probe import Probe
from apsft_dagster.core.config.sections.protocol import Markers
from apsft_dagster.core.config.sections.ray import Ray
from apsft_dagster.core.config.sections.rehearsal import TRIGGER_FIELDS
from apsft_dagster.core.config.sections.review import POINTS, Review
from apsft_dagster.core.config.sections.rollouts import Rollouts
from apsft_dagster.core.config.sections.run_report import DEFAULT_SIGNALS, HackThresholds, RunReport
from apsft_dagster.core.config.sections.scoring import Scoring
from apsft_dagster.core.config.sections.seeds import Seeds
from apsft_dagster.core.config.sections.selection import Selection
from apsft_dagster.core.config.sections.stage_b import StageB
from apsft_dagster.core.config.sections.tasks import Split, Tasks, known_families, known_levels
from apsft_dagster.core.config.sections.training import Lora, LossWeights, Throughput, Training
from apsft_dagster.core.config.sections.vllm import VLLM_CPU_HEAD_DIMS, Vllm

_REGISTRY = {"KNOWN_FAMILIES": known_families, "KNOWN_LEVELS": known_levels}  # read from core/tasks/ when asked


def __getattr__(name: str) -> tuple:
    """`KNOWN_FAMILIES` (the family registry's names, in its order) and `KNOWN_LEVELS` (the builders' levels)."""
    if name in _REGISTRY:
        return _REGISTRY[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ARCHITECTURES", "DEFAULT_SIGNALS", "LATE_FIELDS", "POINTS", "SAFE_LOADER", "SIBLING_SECTIONS", "TRIGGER_FIELDS",
    "UNSEALED_SECTIONS", "VLLM_CPU_HEAD_DIMS", "Compute", "Config", "Embedded", "Envelope", "Evaluation", "Gpu",
    "HackThresholds", "Harvest", "LinearAttention", "LoopThresholds", "Lora", "LossMask", "LossWeights", "Markers",
    "Merge", "ModelSpec", "NonNegFloat", "NonNegInt", "Plan", "PosFloat", "PosInt", "Probe", "Ray", "Review",
    "Rollouts", "RunReport", "Sampling", "Scoring", "Seeds", "Selection", "Share", "Split", "StageB", "Strict", "Tasks",
    "Throughput", "Training", "Unit", "Vision", "Vllm", "body_digest", "canonical_json", "known_families",
    "known_levels", "late_defaults_dropped", "load_config", "profile_file", "read_profile", "resolve_config_path",
]
