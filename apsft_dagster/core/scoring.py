"""Teacher-forced scoring of the canonical answer under a thought (docs/PROTOCOL.md §6).

For prompt x, thought z, boundary b and canonical answer y*, one forward pass over x + z + b + y*
gives both
    log p(y* | x, z, b)   (answer tokens: those starting at or after y*'s first character)
    log p(b, y* | x, z)   (joint tokens: those starting at or after b's first character)
and the gains are differences against the empty thought z = "":
    answer_gain(z) = mean log p(y* | x, z, b) - mean log p(y* | x, empty, b)   [nats per answer token]
    joint_gain(z)  = mean log p(b, y* | x, z) - mean log p(b, y* | x, empty)   [nats per b+y* token]
Only the positions that predict joint tokens go through the LM head (`logits_to_keep`), so cost
does not scale with vocabulary x length.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from apsft_dagster.core.text_protocol import active


@torch.no_grad()
def score_trace(model, tokenizer, prompt: str, thought: str, answer: str) -> dict:
    """Reference mode: batch of one, no padding. `prompt` is formatted (chat template + `<think>`),
    `answer` carries its leading space; `thought=""` gives the empty baseline. Sums are in nats."""
    spans = active().locate_spans(tokenizer, prompt, thought, answer)
    ids = torch.tensor([spans.input_ids], device=model.device)
    first = spans.boundary.start  # first joint token; every joint token is predicted from its left
    positions = torch.arange(first - 1, ids.shape[1] - 1, device=model.device)
    logits = model(input_ids=ids, logits_to_keep=positions).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1).gather(1, ids[0, first:, None])[:, 0].double()
    return _sums(logprobs, len(spans.answer))


@torch.no_grad()
def score_traces(model, tokenizer, items: Sequence[tuple[str, str, str]], batch_tokens: int = 8192) -> list[dict]:
    """`score_trace` for many (prompt, thought, answer) items, in batches of records of similar
    length (shortest first, at most `batch_tokens` padded tokens a batch), each row the same
    computation as alone: right padding and no attention mask, so under the causal mask and the
    causal convolutions and recurrences of the linear-attention layers a record's tokens never
    see its padding, which only follows them. Results in item order."""
    spans = [active().locate_spans(tokenizer, *item) for item in items]
    out: list[dict | None] = [None] * len(spans)
    for batch in batches_by_length([len(s.input_ids) for s in spans], batch_tokens):
        for i, result in zip(batch, _score_batch(model, tokenizer, [spans[i] for i in batch])):
            out[i] = result
    return out


def batches_by_length(lengths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Indices shortest first (ties by index), cut into runs whose padded size (rows x longest)
    stays within `batch_tokens` (a longer record runs alone)."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * lengths[i] <= batch_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def _score_batch(model, tokenizer, spans) -> list[dict]:
    width = max(len(s.input_ids) for s in spans)
    ids = torch.full((len(spans), width), tokenizer.pad_token_id, device=model.device)
    for row, s in enumerate(spans):
        ids[row, :len(s.input_ids)] = torch.tensor(s.input_ids)
    low = min(s.boundary.start for s in spans) - 1  # the first position any row needs logits at
    logits = model(input_ids=ids, logits_to_keep=torch.arange(low, width - 1, device=model.device)).logits
    results = []
    for row, s in enumerate(spans):
        first, end = s.boundary.start, len(s.input_ids)
        picked = torch.log_softmax(logits[row, first - 1 - low:end - 1 - low].float(), dim=-1)
        logprobs = picked.gather(1, ids[row, first:end, None])[:, 0].double()
        results.append(_sums(logprobs, len(s.answer)))
    return results


def _sums(logprobs: torch.Tensor, n_answer: int) -> dict:
    return {"answer_logprob": float(logprobs[len(logprobs) - n_answer:].sum()), "joint_logprob": float(logprobs.sum()),
            "n_answer_tokens": n_answer, "n_joint_tokens": len(logprobs)}


def with_gains(scored: dict, empty: dict) -> dict:
    """Per-token means, both empty baselines, and the answer/joint gains (means and raw sums)."""
    answer_mean = scored["answer_logprob"] / scored["n_answer_tokens"]
    joint_mean = scored["joint_logprob"] / scored["n_joint_tokens"]
    empty_answer_mean = empty["answer_logprob"] / empty["n_answer_tokens"]
    empty_joint_mean = empty["joint_logprob"] / empty["n_joint_tokens"]
    return {
        **scored,
        "answer_mean": answer_mean, "joint_mean": joint_mean,
        "empty_answer_logprob": empty["answer_logprob"], "empty_joint_logprob": empty["joint_logprob"],
        "empty_answer_mean": empty_answer_mean, "empty_joint_mean": empty_joint_mean,
        "answer_gain": answer_mean - empty_answer_mean, "joint_gain": joint_mean - empty_joint_mean,
        "answer_gain_sum": scored["answer_logprob"] - empty["answer_logprob"],
        "joint_gain_sum": scored["joint_logprob"] - empty["joint_logprob"],
    }
