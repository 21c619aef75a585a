"""vLLM generation (GPU only), written against vLLM's documented offline API.

vLLM is imported lazily, so nothing else depends on it; the CPU machines test the pure parts
(`sampling_kwargs`, `completion`) against a fake `vllm` module. Exact-prefix continuations pass
token ids through `TokensPrompt(prompt_token_ids=...)`, never re-tokenized text; prefix caching
stays off.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence

from apsft_dagster.core.config import Sampling
from apsft_dagster.core.engines.base import Completion, GenerationRequest
from apsft_dagster.core.engines.lifetime import free_memory


class VllmEngine:
    def __init__(self, path: str, stop_tokens: Sequence[str], dtype: str = "bfloat16",
                 max_model_len: int | None = None, gpu_memory_utilization: float = 0.9):
        from transformers import AutoTokenizer
        from vllm import LLM  # lazy: GPU extra only

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.stop_token_ids = tuple(self.tokenizer.convert_tokens_to_ids(list(stop_tokens)))
        self.llm = LLM(model=path, tokenizer=path, dtype=dtype, max_model_len=max_model_len,
                       gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=False)

    def generate(self, requests: Sequence[GenerationRequest], sampling: Sampling) -> list[list[Completion]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for r in requests]
        params = [SamplingParams(**sampling_kwargs(r, sampling, self.stop_token_ids)) for r in requests]
        results = self.llm.generate(prompts, params, use_tqdm=False)
        return [[completion(o, r.stop_token_ids or self.stop_token_ids) for o in result.outputs]
                for r, result in zip(requests, results)]

    def close(self) -> None:
        """Release the model: this engine owns its LLM, so the distributed state goes too."""
        self.llm = None
        release_vllm_memory(owned=True)


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


def release_vllm_memory(owned: bool) -> None:
    """Free what a dropped LLM held. Only an owner tears down vLLM's distributed state
    (`cleanup_dist_env_and_memory`, optional: absent in some versions); a borrower must not,
    the LLM may still serve its owner."""
    gc.collect()
    if owned:
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        except ImportError:
            pass
        else:
            cleanup_dist_env_and_memory()
    free_memory()
