"""vLLM generation (GPU only), written against vLLM's documented offline API.

Not executed on the project's machines: vLLM cannot be installed there. It is imported lazily,
so nothing else depends on it. Exact-prefix continuations pass token ids through
`TokensPrompt(prompt_token_ids=...)`, never re-tokenized text; prefix caching stays off.
"""

from __future__ import annotations

from collections.abc import Sequence

from apsft_dagster.core.config import Sampling
from apsft_dagster.core.engines.base import Completion, GenerationRequest


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
        params = [SamplingParams(n=r.n, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
                                 seed=r.seed, max_tokens=r.max_tokens, stop_token_ids=list(self.stop_token_ids),
                                 skip_special_tokens=False)
                  for r in requests]
        results = self.llm.generate(prompts, params, use_tqdm=False)
        return [[_completion(o, self.stop_token_ids) for o in result.outputs] for result in results]


def _completion(output, stop_token_ids: Sequence[int]) -> Completion:
    """vLLM keeps a matched stop token id in `token_ids`; append it if a version leaves it out."""
    ids = tuple(output.token_ids)
    if output.finish_reason == "stop" and output.stop_reason in stop_token_ids and (not ids or ids[-1] != output.stop_reason):
        ids += (output.stop_reason,)
    return Completion(ids, "stop" if output.finish_reason == "stop" else "length")
