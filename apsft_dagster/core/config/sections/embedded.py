"""The `embedded` section: the tiny policy a profile trains for itself (core/embedded/)."""

from __future__ import annotations

from apsft_dagster.core.config.base import NonNegFloat, NonNegInt, PosFloat, PosInt, Strict


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
