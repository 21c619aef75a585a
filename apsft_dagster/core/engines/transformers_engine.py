"""Transformers generation: batched decoding whose closed rows leave the batch (core/engines/decode.py),
every request drawn from its own seed.

Requests share batches (a request's `n` samples are `n` rows, never split), and every row samples
from its own generator: sample j of a request seeded s draws what the one-sample request seeded
s + j draws (`GenerationRequest.sample_seeds`, vLLM's rule for a request's children). So a task's
bank depends on its own seeds only, never on what else ran in the batch or the process.
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

    # rows (samples) per batch (benchmarks/bench_evaluation.py, greedy: 13.5x one at a time on CPU, 32: 9.3x)
    batch_size = 128

    @torch.no_grad()
    def generate(self, requests: Sequence[GenerationRequest], sampling: Sampling) -> list[list[Completion]]:
        """Requests share left-padded batches of up to `batch_size` rows (a request's `n` samples
        are `n` rows, never split; longest prompts first; grouped by stop tokens and length
        limit). A sampled request's sample j draws from its own generator seeded `seed + j`
        (`GenerationRequest.sample_seeds`, core/engines/decode.py), so no token depends on its batch."""
        groups: dict[tuple, list[int]] = {}  # requests that can share a batch, longest prompts first
        for i in sorted(range(len(requests)), key=lambda i: (-len(requests[i].prompt_ids), i)):
            groups.setdefault((self._stops(requests[i]), requests[i].max_tokens), []).append(i)
        out: list[list[Completion] | None] = [None] * len(requests)
        for (stops, max_tokens), members in groups.items():
            for batch in _row_batches([requests[i].n for i in members], self.batch_size):
                chosen = [members[j] for j in batch]
                for i, completions in zip(chosen, self._batch([requests[i] for i in chosen], stops, max_tokens,
                                                              sampling)):
                    out[i] = completions
        return out

    def _stops(self, request: GenerationRequest) -> tuple[int, ...]:
        return tuple(request.stop_token_ids or self.stop_token_ids)

    def _batch(self, requests: Sequence[GenerationRequest], stops: tuple[int, ...], max_tokens: int,
               sampling: Sampling) -> list[Completion]:
        from apsft_dagster.core.engines.decode import SeededDraw, decode, greedy
        from apsft_dagster.core.progress import Pulse

        rows = [r.prompt_ids for r in requests for _ in range(r.n)]  # as num_return_sequences expands them
        seeds = [seed for r in requests for seed in r.sample_seeds()]
        draw = greedy if sampling.temperature == 0 else SeededDraw(seeds, sampling)
        new = decode(self.model, rows, self.tokenizer.pad_token_id, stops, max_tokens, draw,
                     Pulse(len(rows), max_tokens))  # a line each half minute in a `pulsing` stage
        completions = iter(cut_at_stop(row, stops, max_tokens) for row in new)
        return [[next(completions) for _ in range(r.n)] for r in requests]

    def one_at_a_time(self, request: GenerationRequest, sampling: Sampling) -> list[Completion]:
        """Hugging Face's own sampler on each sample alone: sample j is `generate` with one return
        sequence after `torch.manual_seed(seed + j)` (greedy: one `generate` for the request). What
        every batched draw must equal (tests/test_seeded_sampler.py, tests/test_decode.py) and the
        baseline of benchmarks/bench_stages.py."""
        if sampling.temperature == 0:
            return self._generate_alone(request, sampling, request.seed, request.n)
        return [c for seed in request.sample_seeds() for c in self._generate_alone(request, sampling, seed, 1)]

    def _generate_alone(self, request: GenerationRequest, sampling: Sampling, seed: int, n: int) -> list[Completion]:
        device = self.model.device
        ids = torch.tensor([request.prompt_ids], device=device)
        knobs = ({"do_sample": False} if sampling.temperature == 0 else
                 {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p,
                  "top_k": sampling.top_k})
        torch.manual_seed(seed)  # seeds CPU and every CUDA device
        out = self.model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=request.max_tokens,
            num_return_sequences=n, eos_token_id=list(self._stops(request)),
            pad_token_id=self.tokenizer.pad_token_id, **knobs)
        return [cut_at_stop(row, self._stops(request), request.max_tokens) for row in out[:, ids.shape[1]:].tolist()]


def _row_batches(rows: Sequence[int], limit: int) -> list[list[int]]:
    """Consecutive index runs whose row counts sum to at most `limit` (a larger request runs alone)."""
    batches: list[list[int]] = []
    filled = 0
    for i, n in enumerate(rows):
        if batches and filled + n <= limit:
            batches[-1].append(i)
            filled += n
        else:
            batches.append([i])
            filled = n
    return batches
