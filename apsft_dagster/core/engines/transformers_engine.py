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
        import transformers

        self.library_version = transformers.__version__  # in the generation cache key (engine_identity)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.stop_token_ids = tuple(stop_token_ids)

    @classmethod
    def load(cls, path: str, stop_tokens: Sequence[str], device: str = "cpu",
             dtype: str = "float32") -> TransformersEngine:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(dtype)).to(device)
        return cls(model, tokenizer, tokenizer.convert_tokens_to_ids(list(stop_tokens)))

    def close(self) -> None:
        """Drop the model; the caller frees memory once no reference is left (`free_memory`)."""
        self.model = None

    # greedy single-sample requests at a time (benchmarks/bench_evaluation.py: 13.5x one at a time on CPU, 32: 9.3x)
    batch_size = 128

    @torch.no_grad()
    def generate(self, requests: Sequence[GenerationRequest], sampling: Sampling) -> list[list[Completion]]:
        """Sampled requests one at a time (each with its own seed); greedy single-sample requests
        in left-padded batches, longest prompts first, grouped by stop tokens and length limit."""
        if sampling.temperature != 0 or any(r.n != 1 for r in requests):
            return [self._one(request, sampling) for request in requests]
        groups: dict[tuple, list[int]] = {}  # requests that can share a batch, longest prompts first
        for i in sorted(range(len(requests)), key=lambda i: (-len(requests[i].prompt_ids), i)):
            groups.setdefault((self._stops(requests[i]), requests[i].max_tokens), []).append(i)
        out: list[list[Completion] | None] = [None] * len(requests)
        for (stops, max_tokens), members in groups.items():
            for start in range(0, len(members), self.batch_size):
                batch = members[start:start + self.batch_size]
                for i, completion in zip(batch, self._greedy([requests[i] for i in batch], stops, max_tokens)):
                    out[i] = [completion]
        return out

    def _stops(self, request: GenerationRequest) -> tuple[int, ...]:
        return tuple(request.stop_token_ids or self.stop_token_ids)

    def _greedy(self, requests: Sequence[GenerationRequest], stops: tuple[int, ...],
                max_tokens: int) -> list[Completion]:
        pad, width = self.tokenizer.pad_token_id, max(len(r.prompt_ids) for r in requests)
        ids = torch.tensor([[pad] * (width - len(r.prompt_ids)) + list(r.prompt_ids) for r in requests],
                           device=self.model.device)
        mask = torch.tensor([[0] * (width - len(r.prompt_ids)) + [1] * len(r.prompt_ids) for r in requests],
                            device=self.model.device)
        out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens, do_sample=False,
                                  eos_token_id=list(stops), pad_token_id=pad)
        return [cut_at_stop(row, stops, max_tokens) for row in out[:, width:].tolist()]

    def _one(self, request: GenerationRequest, sampling: Sampling) -> list[Completion]:
        device = self.model.device
        ids = torch.tensor([request.prompt_ids], device=device)
        knobs = ({"do_sample": False} if sampling.temperature == 0 else
                 {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p,
                  "top_k": sampling.top_k})
        torch.manual_seed(request.seed)  # seeds CPU and every CUDA device
        out = self.model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=request.max_tokens,
            num_return_sequences=request.n, eos_token_id=list(self._stops(request)),
            pad_token_id=self.tokenizer.pad_token_id, **knobs)
        return [cut_at_stop(row, self._stops(request), request.max_tokens) for row in out[:, ids.shape[1]:].tolist()]
