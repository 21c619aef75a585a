"""The Transformers engine's decoding loop: a row leaves the batch the step it closes.

Hugging Face's `generate` steps every row until the last one closes, so one long row keeps a
whole batch of 128 in the forward pass (and, at Qwen3.5's 248,320 ids, in the LM head) for the
rest of the allowance. This loop runs the same forward passes on the same inputs (left padding,
positions from the attention mask, `logits_to_keep=1`, the model's own cache), takes each row's
token as `generate` would for its sample alone, and drops closed rows from the batch and the cache
(full attention and linear attention alike, `Cache.reorder_cache`). Rows are independent in the forward pass, so
every token a row draws is the one `generate` draws for it (tests/test_seeded_sampler.py and
tests/test_decode.py compare them with Hugging Face's own loop).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from apsft_dagster.core.config import Sampling
from apsft_dagster.core.engines.seeded_sampler import warpers


class SeededDraw:
    """Each row draws from its own generator, seeded with its sample's seed (`GenerationRequest.sample_seeds`:
    sample j of a request seeded s is the one-sample request seeded s + j, vLLM's rule). A row draws
    what Hugging Face's `generate` draws for its sample alone (`torch.manual_seed(s + j)`, one return
    sequence), and a closed row draws nothing: a step costs one draw over the vocabulary per open
    row, however many samples its request had (with Qwen3.5's 248,320 ids, torch's `multinomial`
    takes one exponential per id of every row it is given)."""

    def __init__(self, seeds: Sequence[int], sampling: Sampling):
        if sampling.temperature <= 0:
            raise ValueError("SeededDraw samples; greedy decoding needs no sampler")
        self.seeds, self.generators = list(seeds), None
        self.warpers = warpers(sampling)

    def __call__(self, rows: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """`rows`: the open rows' indices in the first batch, ascending; `logits`: theirs, float32."""
        if self.generators is None:  # on the logits' device, as `torch.manual_seed` seeds CPU and CUDA alike
            self.generators = [torch.Generator(device=logits.device).manual_seed(seed) for seed in self.seeds]
        open_rows = rows.tolist()
        hands = min(torch.get_num_threads(), len(open_rows))
        parts = [list(range(k, len(open_rows), hands)) for k in range(hands)]

        def draw(part: list[int]) -> list[torch.Tensor]:  # Hugging Face's warpers and softmax, row by row
            probs = torch.softmax(self.warpers(None, logits if hands < 2 else logits[part]), dim=-1)
            return [torch.multinomial(probs[j:j + 1], num_samples=1, generator=self.generators[open_rows[i]])[0, 0]
                    for j, i in enumerate(part)]
        # rows draw apart (each from its own generator), so with threads to spare the profile's threads
        # share them: torch runs a row's exponentials serially (full_cpu, 2 threads: a step's draws ~1.9x faster)
        results = [draw(parts[0])] if hands < 2 else list(_pool(hands).map(draw, parts))
        drawn: list[torch.Tensor | None] = [None] * len(open_rows)
        for part, got in zip(parts, results):
            for i, token in zip(part, got):
                drawn[i] = token
        return torch.stack(drawn)


@functools.cache
def _pool(hands: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(hands, thread_name_prefix="apsft-draw")


def greedy(rows: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)


@torch.no_grad()
def decode(model, prompts: Sequence[Sequence[int]], pad: int, stops: Sequence[int], max_tokens: int,
           draw=greedy, beat=None) -> list[list[int]]:
    """New tokens per prompt (through the first stop token, or `max_tokens` of them), decoded as
    one left-padded batch whose closed rows leave it. `draw(rows, logits)` picks the open rows' tokens;
    `beat(step, rows)`, if given, hears each step (from 1) and how many rows drew in it."""
    from transformers import DynamicCache

    device, width = model.device, max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)  # as `generate` derives them
    cache = DynamicCache(config=model.config)
    given = {_cache_argument(model): cache}
    rows = torch.arange(len(prompts), device=device)
    out: list[list[int]] = [[] for _ in prompts]
    stop_ids = torch.tensor(sorted(set(stops)), device=device)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                   **given).logits
    if cache.get_seq_length() != width:  # a cache the model did not fill would decode from one token on
        raise RuntimeError(f"{type(model).__name__} did not fill the cache it was given ({cache.get_seq_length()} "
                           f"of {width} positions): this transformers' forward takes it under another name")
    for step in range(max_tokens):
        tokens = draw(rows, logits[:, -1].to(copy=True, dtype=torch.float32))
        if beat is not None:
            beat(step + 1, len(rows))
        for row, token in zip(rows.tolist(), tokens.tolist()):
            out[row].append(token)
        open_ = ~torch.isin(tokens, stop_ids)
        if step + 1 == max_tokens or not open_.any():
            break
        if not open_.all():  # closed rows leave the batch and the cache
            keep = open_.nonzero()[:, 0]
            cache.reorder_cache(keep)
            rows, tokens, mask, positions = rows[keep], tokens[keep], mask[keep], positions[keep]
        mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=-1)
        positions = positions[:, -1:] + 1
        logits = model(input_ids=tokens[:, None], attention_mask=mask, position_ids=positions, use_cache=True,
                       logits_to_keep=1, **given).logits
    return out


def _cache_argument(model) -> str:
    """The forward's name for the cache: `cache` from transformers 5.20, `past_key_values` before (the
    vLLM lane's venv pins transformers below 5.20)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
