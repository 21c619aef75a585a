"""The generation interface the harvest protocol is written against."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from apsft_dagster.core.config import Sampling

GREEDY = Sampling(temperature=0.0, top_p=1.0, top_k=0)  # the deterministic decoding the probe and evaluation use


@dataclass(frozen=True)
class GenerationRequest:
    """`n` samples continuing `prompt_ids` exactly (token ids, never re-tokenized text).
    `stop_token_ids` replaces the engine's stop tokens for this request (e.g. evaluation stops
    only at the end of turn, not at `</think>`)."""

    prompt_ids: tuple[int, ...]
    n: int
    max_tokens: int
    seed: int
    stop_token_ids: tuple[int, ...] | None = None

    def sample_seeds(self) -> list[int]:
        """Sample `j` is the one-sample request seeded `seed + j`: vLLM's rule for a request's `n`
        children (`vllm/v1/engine/parallel_sampling.py`), and the Transformers engine's. Each sample
        then draws alone, whatever its siblings drew or whether they are done."""
        return [self.seed + j for j in range(self.n)]


@dataclass(frozen=True)
class Completion:
    token_ids: tuple[int, ...]  # new tokens exactly as sampled, the stop token included
    finish_reason: str  # "stop" (a stop token ended it) or "length" (max_tokens reached)


class GenerationEngine(Protocol):
    tokenizer: object  # the model's Hugging Face tokenizer: prompt ids, decoding, span location
    stop_token_ids: tuple[int, ...]

    def generate(self, requests: Sequence[GenerationRequest], sampling: Sampling) -> list[list[Completion]]:
        """One list of `request.n` completions per request, in request order."""
        ...


def cut_at_stop(new_ids: Sequence[int], stop_token_ids: Sequence[int], max_tokens: int) -> Completion:
    """Keep tokens through the first stop token (what follows is padding); else it ran out of length."""
    stops = set(stop_token_ids)
    for i, token in enumerate(new_ids[:max_tokens]):
        if token in stops:
            return Completion(tuple(new_ids[:i + 1]), "stop")
    return Completion(tuple(new_ids[:max_tokens]), "length")
