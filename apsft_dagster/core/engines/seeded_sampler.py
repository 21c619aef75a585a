"""Sampling many seeded requests in one batch, each drawing exactly what it would draw alone.

Hugging Face's sampler draws every row's next token from one generator (`torch.multinomial` on
the whole batch), so a batched request's tokens would depend on its neighbours. Here the batch
runs Hugging Face's greedy loop with one logits processor that does the sampling itself: the
same warpers Hugging Face applies (temperature, top-k, top-p, in its order), the same softmax,
then one `torch.multinomial` per request, over that request's `n` rows, on the request's own
generator seeded with its seed. The request alone (`torch.manual_seed(seed)`, then
`generate(do_sample=True, num_return_sequences=n)`) consumes its generator identically, so a
batched draw equals the one-at-a-time draw whenever the batched forward gives the rows the same
logits (tests/test_seeded_sampler.py: every draw, on the tested models).

Why this survives a resume: a request's tokens are a function of its prompt, its seed and its
logits only, never of its batch position or of how many requests ran before it; a resumed
stage that re-issues any subset of requests draws the same tokens for each.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from apsft_dagster.core.config import Sampling


def warpers(sampling: Sampling) -> LogitsProcessorList:
    """Hugging Face's sampling warpers for `sampling`, in the order `generate(do_sample=True)` builds them
    (top-p after top-k as `TopPAfterTopK`: the same scores without sorting the vocabulary)."""
    out = LogitsProcessorList()
    if sampling.temperature != 1.0:
        out.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_k != 0:
        out.append(TopKLogitsWarper(top_k=sampling.top_k, min_tokens_to_keep=1))
    if sampling.top_p < 1.0:
        out.append((TopPAfterTopK if sampling.top_k != 0 else TopPLogitsWarper)(top_p=sampling.top_p,
                                                                              min_tokens_to_keep=1))
    return out


class TopPAfterTopK(TopPLogitsWarper):
    """Hugging Face's top-p on scores that top-k left finite in a few places, without its sort of the
    whole row (with Qwen3.5's 248,320 ids, 22 ms a row a step on one CPU core; the rest of a step
    costs a fraction of that). Its ascending sort is -inf everywhere but the last m places, which
    hold the m finite scores ascending: that row is built directly and the same softmax, cumsum and
    threshold run on it, so every kept score is the same bits. Where tied finite scores straddle the
    threshold, which one goes could differ from the sort's order (the test compares every draw)."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        m = int(torch.isfinite(scores).sum(dim=-1).max())
        if m * 8 > scores.shape[-1]:  # most of the row is finite: the sort is as cheap
            return super().__call__(input_ids, scores)
        values, indices = torch.topk(scores, m, dim=-1)  # descending; a row with fewer finite ends in -inf
        ascending = torch.full_like(scores, float("-inf"))
        ascending[..., -m:] = values.flip(-1)
        remove = ascending.softmax(dim=-1).cumsum(dim=-1)[..., -m:] <= (1 - self.top_p)
        remove[..., -self.min_tokens_to_keep:] = False
        drop = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, indices.flip(-1), remove)
        return scores.masked_fill(drop, self.filter_value)


class SeededSampler(LogitsProcessor):
    """`requests` is (seed, n) per request, its n rows consecutive in the batch, in order; each
    request samples its rows from its own generator. The returned scores are 0 at the drawn
    token and -inf elsewhere, so the greedy loop takes the draw."""

    def __init__(self, requests: Sequence[tuple[int, int]], sampling: Sampling):
        if sampling.temperature <= 0:
            raise ValueError("SeededSampler samples; greedy decoding needs no sampler")
        self.requests, self.generators = list(requests), None
        self.rows = sum(n for _, n in self.requests)
        self.warpers = warpers(sampling)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.generators is None:  # on the logits' device, as `torch.manual_seed` seeds CPU and CUDA alike
            self.generators = [torch.Generator(device=scores.device).manual_seed(seed) for seed, _ in self.requests]
        probs = torch.softmax(self.warpers(input_ids, scores), dim=-1)
        drawn, start = [], 0
        for (_, n), generator in zip(self.requests, self.generators):
            drawn.append(torch.multinomial(probs[start:start + n], num_samples=1, generator=generator)[:, 0])
            start += n
        out = torch.full_like(scores, float("-inf"))
        out[torch.arange(self.rows, device=scores.device), torch.cat(drawn)] = 0.0
        return out
