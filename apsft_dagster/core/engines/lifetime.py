"""Engines on the profile's device, one resident at a time: loading, the preflight, release.

`compute` (config) says where every model-holding stage runs; `preflight` checks, before anything
is loaded, that the device is here and, on CUDA, that the model's kernels import (core/kernels.py).
A stage asks for an engine for a model directory (the base model or a merged model); loading
another first releases the one that is resident, so two models never share GPU memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from apsft_dagster.core.config import Compute, Config, Vllm
from apsft_dagster.core.engines.base import GenerationEngine
from apsft_dagster.core.errors import DeviceError
from apsft_dagster.core.kernels import has_linear_attention, require_kernels


def pin_threads(compute: Compute) -> None:
    """Set torch's intra-op thread count from the profile and check the pinned CPU kernels
    (core/determinism.py). A process that never set the count computes other float32 bits on CPU
    than one that set it to the same number (seen: a LoRA adapter trained after the embedded
    build, which sets threads, differed from one trained in a fresh process), so every
    model-holding process sets it."""
    import torch

    from apsft_dagster.core.determinism import check_cpu_kernels

    check_cpu_kernels()
    torch.set_num_threads(compute.threads)


def require_device(compute: Compute, stage: str, profile: str) -> None:
    """Fail before anything is loaded or written when the profile's device is not here; pin the
    thread count (`pin_threads`) when it is."""
    import torch

    if compute.device == "cuda" and not torch.cuda.is_available():
        raise DeviceError(
            f"stage {stage} needs device cuda (profile {profile}: compute.device cuda, dtype {compute.dtype}) "
            "but this machine has no CUDA device; nothing was written. Run it on a GPU machine, or use a "
            "profile with compute.device: cpu (e.g. smoke)")
    pin_threads(compute)


def preflight(config: Config, stage: str) -> None:
    """What a model-holding stage needs of this machine, before any GPU work: the profile's device
    (`require_device`), then on CUDA the kernels of the model's linear-attention layers."""
    require_device(config.compute, stage, config.profile)
    if config.compute.device == "cuda":  # a CPU run reads nothing more
        require_kernels(config.compute, has_linear_attention(config), config.gpu, stage)


def one_instrument_resident(compute: Compute, backend: str) -> bool:
    """Whether the scoring instruments take turns on the device: on CUDA when the fast instrument
    is vLLM. vLLM's start needs `gpu_memory_utilization` of the whole device free (0.9 x 79.2 GiB
    = 71.3 GiB on an H100), which the reference model's bf16 weights beside it (7.8 GiB for
    Qwen3.5-4B) and the CUDA contexts leave no room for; the profile's utilization is sealed, so
    the reference gives way rather than vLLM shrinking. Elsewhere both stay (on CPU vLLM's KV cache
    is sized in bytes; Transformers' fast instrument shares the reference's model)."""
    return compute.device == "cuda" and backend == "vllm"


def load_generation_engine(path: str, backend: str, compute: Compute, stop_tokens: Sequence[str],
                           vllm: Vllm) -> GenerationEngine:
    """`vllm`: the profile's `vllm` section, read when `backend` is vllm."""
    if backend == "vllm":
        from apsft_dagster.core.engines.vllm_engine import VllmEngine

        return VllmEngine(path, stop_tokens, compute, vllm)
    from apsft_dagster.core.engines.transformers_engine import TransformersEngine

    return TransformersEngine.load(path, stop_tokens, compute.device, compute.dtype)


def load_causal_lm(path: str, compute: Compute) -> tuple:
    """(model in eval mode on the profile's device and dtype, its tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from apsft_dagster.core.engines.transformers_engine import torch_dtype

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(compute.dtype)).to(compute.device)
    return model.eval(), AutoTokenizer.from_pretrained(path)
