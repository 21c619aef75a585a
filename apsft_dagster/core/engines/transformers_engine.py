"""Transformers generation: one `model.generate` per request, its `n` samples in one batch.

A request's samples share one seeded sampler state (like vLLM's `SamplingParams(n, seed)`), so
a task's bank depends on its own seeds only, never on what else ran in the batch or the process.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from apsft_dagster.core.config import Sampling
from apsft_dagster.core.engines.base import Completion, GenerationRequest, cut_at_stop


def torch_dtype(name: str) -> torch.dtype:
    """A `compute.dtype` name ("float32", "bfloat16", "float16") as a torch dtype."""
    return getattr(torch, name)


class TransformersEngine:
    def __init__(self, model, tokenizer, stop_token_ids: Sequence[int]):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.stop_token_ids = tuple(stop_token_ids)

    @classmethod
    def load(cls, path: str, stop_tokens: Sequence[str], device: str = "cpu", dtype: str = "float32") -> TransformersEngine:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(dtype)).to(device)
        return cls(model, tokenizer, tokenizer.convert_tokens_to_ids(list(stop_tokens)))

    def close(self) -> None:
        """Drop the model; the caller frees memory once no reference is left (`free_memory`)."""
        self.model = None

    @torch.no_grad()
    def generate(self, requests: Sequence[GenerationRequest], sampling: Sampling) -> list[list[Completion]]:
        return [self._one(request, sampling) for request in requests]

    def _one(self, request: GenerationRequest, sampling: Sampling) -> list[Completion]:
        device = self.model.device
        ids = torch.tensor([request.prompt_ids], device=device)
        knobs = ({"do_sample": False} if sampling.temperature == 0 else
                 {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k})
        torch.manual_seed(request.seed)  # seeds CPU and every CUDA device
        out = self.model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=request.max_tokens,
            num_return_sequences=request.n, eos_token_id=list(self.stop_token_ids),
            pad_token_id=self.tokenizer.pad_token_id, **knobs)
        return [cut_at_stop(row, self.stop_token_ids, request.max_tokens) for row in out[:, ids.shape[1]:].tolist()]
