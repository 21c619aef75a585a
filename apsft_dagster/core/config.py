"""The one typed config: YAML profiles (`smoke`, `full`), validated on load, with a canonical digest.

Every number of the protocol (docs/PROTOCOL.md) lives here once (the sections' models:
`config_sections.py`; the sibling systems' optional sections: `loss_mask/settings.py`, `run_report/settings.py`).
Profiles are chosen by name (`APSFT_PROFILE`, default `smoke`) or path (`APSFT_CONFIG`). `model.path` stays as written:
the digest binds the configured model identity, never a machine's absolute path, and
`APSFT_MODEL_DIR` relocates a local snapshot without changing the digest (`paths.local_model_dir`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import PrivateAttr, ValidationError, model_validator

from apsft_dagster.core.config_sections import (  # the sections, importable from here as before
    ARCHITECTURES, KNOWN_FAMILIES, KNOWN_LEVELS, VLLM_CPU_HEAD_DIMS, Compute, Embedded, Evaluation, Harvest,
    LinearAttention, LoopThresholds, Lora, LossWeights, Markers, Merge, ModelSpec, Probe, Rollouts, Sampling, Scoring,
    Seeds, Selection, Split, StageB, Strict, Tasks, Throughput, Training, Vision, Vllm, late_defaults_dropped,
)
from apsft_dagster.core.errors import ConfigError
from apsft_dagster.core.gpu_settings import Gpu
from apsft_dagster.core.json_input import error_field
from apsft_dagster.core.loss_mask.settings import LossMask
from apsft_dagster.core.paths import CONFIG_DIR, local_model_dir
from apsft_dagster.core.plan_settings import Plan
from apsft_dagster.core.ray_settings import Ray
from apsft_dagster.core.review_settings import Review
from apsft_dagster.core.run_report.settings import HackThresholds, RunReport
from apsft_dagster.core.splits import CONFIGURED, SPLIT_TABLE

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, 8x faster where PyYAML was built with it

# other systems of the platform: their settings never move the experiment's seal
SIBLING_SECTIONS = ("loss_mask", "run_report")
# Left out of the digest that binds every receipt: settings that change no artifact (the siblings', `plan`'s envelopes
# of `apsft plan`, `gpu`'s kernel choice), so setting them on the machine that runs the protocol voids no receipt.
UNSEALED_SECTIONS = (*SIBLING_SECTIONS, "plan", "gpu", "review", "ray")  # review: when `apsft run` pauses; ray: where


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
    review: Review | None = None  # the review points `apsft run` pauses at (core/review_settings.py)
    ray: Ray | None = None  # the Ray cluster the engine stages fan out over (core/ray_settings.py)
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


def body_digest(body: dict) -> str:
    """The digest of a config body (`Config.digest_body`, or one a store kept): SHA-256 of its canonical JSON."""
    return hashlib.sha256(canonical_json(body)).hexdigest()


def canonical_json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def resolve_config_path(profile: str | None = None, path: str | os.PathLike | None = None) -> Path:
    """A path wins over a profile name; the environment fills in whatever the caller left out."""
    if path is None and profile is None:
        path = os.environ.get("APSFT_CONFIG") or None
    if path is not None:
        return Path(path)
    name = profile or os.environ.get("APSFT_PROFILE") or "smoke"
    candidate = CONFIG_DIR / f"{name}.yaml"
    if not candidate.is_file():
        known = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
        raise ConfigError(f"profile {name!r}: no file {candidate}; known profiles are {known}")
    return candidate


def load_config(profile: str | None = None, path: str | os.PathLike | None = None, *,
                require_snapshot: bool = True) -> Config:
    """Parse and validate a profile. Raises ConfigError naming the file and field; writes nothing.
    `require_snapshot=False` skips only the check that a local model's snapshot is on this machine
    (`apsft plan` prices a run before the snapshot is copied); every other check still runs."""
    source = resolve_config_path(profile, path)
    raw = read_profile(source)
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{source}: invalid config:\n{_describe(exc)}") from None
    if config.model.source == "local" and require_snapshot:
        _require_model_dir(config, source)
    if config.tasks.source is not None or config.tasks.source_sha256 is not None:
        from apsft_dagster.core.task_file.pin import bind_task_file

        bind_task_file(config, source)
    if config.rehearsal is not None:
        _bind_rehearsal(config, source, require_snapshot)
    return config


def _bind_rehearsal(config: Config, source: Path, require_snapshot: bool) -> None:
    """Load the registered profile a rehearsal names (never a rehearsal itself) and bind it."""
    from apsft_dagster.core.rehearsal import bind

    path = profile_file(source, config.rehearsal, "rehearsal")
    if (of := read_profile(path).get("rehearsal")) is not None:
        raise ConfigError(f"{source}: rehearsal: {config.rehearsal!r} is itself a rehearsal (of {of!r}); name the "
                          "registered profile it rehearses")
    bind(config, load_config(path=path, require_snapshot=require_snapshot), source, UNSEALED_SECTIONS)


def read_profile(source: Path, _seen: tuple[Path, ...] = ()) -> dict:
    """A profile's YAML as one mapping. `extends: <profile>` (a name under configs/, or a path
    relative to this file) starts from that profile: mappings merge key by key, anything else
    (a list, a number, null) replaces the inherited value."""
    try:
        raw = yaml.load(source.read_text(), Loader=SAFE_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{source}: cannot read YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: top level must be a mapping of config sections")
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    base = profile_file(source, parent, "extends")
    if base.resolve() in _seen:
        raise ConfigError(f"{source}: extends: {parent!r} extends itself (through {[str(p) for p in _seen]})")
    return _merged(read_profile(base, (*_seen, source.resolve())), raw)


def profile_file(source: Path, name: object, key: str) -> Path:
    """The file `key: name` in `source` points at: a profile name under configs/, or a path relative
    to `source`."""
    if not isinstance(name, str):
        raise ConfigError(f"{source}: {key}: expected a profile name or a path, got {name!r}")
    found = source.parent / name if name.endswith((".yaml", ".yml")) else CONFIG_DIR / f"{name}.yaml"
    if not found.is_file():
        raise ConfigError(f"{source}: {key}: {name!r}: no file {found}")
    return found


def _merged(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        field = error_field(err)
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown key; remove it or check its spelling"
        elif "input" in err and err["type"] not in ("missing", "value_error"):
            message += f" (got {err['input']!r})"
        lines.append(f"  {field}: {message}")
    return "\n".join(lines)


def _require_model_dir(config: Config, source: Path) -> None:
    found = local_model_dir(config.model.path)
    if not (found / "config.json").is_file():
        raise ConfigError(
            f"{source}: model.path: {found} is not a model directory (no config.json). "
            f"Place a local snapshot of {config.model.name} (revision {config.model.revision}) there "
            "or set APSFT_MODEL_DIR; nothing is downloaded at run time."
        )
