"""The GPU's kernel choice: the optional `gpu` section of a profile, read by core/kernels.py.

It chooses which kernels compute Qwen3.5's linear-attention layers, not what they compute, so like
`plan` it stays out of the config digest (`core/config/digest.py`, UNSEALED_SECTIONS): allowing the slow
path on one machine invalidates no receipt. Absent, it is `reference_kernels: false`.
"""

from __future__ import annotations

from apsft_dagster.core.config.base import Strict


class Gpu(Strict):
    """What a run on `compute.device: cuda` may fall back on."""

    # true: run on transformers' reference PyTorch kernels where flash-linear-attention or causal-conv1d does not
    # import (correct, ~10x slower, and the budget gate would price training at that speed); false: stop first
    reference_kernels: bool = False
