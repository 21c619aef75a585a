"""The `compute` section: the device, dtype, quantization and threads of every model-holding stage."""

from __future__ import annotations

from typing import Literal

from apsft_dagster.core.config.base import PosInt, Strict


class Compute(Strict):
    """Where every model-holding stage runs: smoke on CPU in float32, full on CUDA in bf16."""

    device: Literal["cpu", "cuda"]
    dtype: Literal["float32", "bfloat16", "float16"]
    quantization: Literal["none", "nf4"]  # of the frozen base weights while training (QLoRA: nf4)
    # torch's intra-op threads, set explicitly in every model-holding process: on CPU the float
    # results (and so the adapters' bytes) depend on it, and even on whether it was set at all
    threads: PosInt
