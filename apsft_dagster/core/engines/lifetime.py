"""Engines on the profile's device, one resident at a time: loading, the device check, release.

`compute` (config) says where every model-holding stage runs. A stage asks for an engine for a
model directory (the base model or a merged model); loading another first releases the one that
is resident, so two models never share GPU memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from apsft_dagster.core.config import Compute, Vllm
from apsft_dagster.core.engines.base import GenerationEngine
from apsft_dagster.core.errors import DeviceError


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
