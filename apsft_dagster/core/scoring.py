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


import torch

from apsft_dagster.core.protocol import locate_spans


@torch.no_grad()
def score_trace(model, tokenizer, prompt: str, thought: str, answer: str) -> dict:
    """Reference mode: batch of one, no padding. `prompt` is formatted (chat template + `<think>`),
    `answer` carries its leading space; `thought=""` gives the empty baseline. Sums are in nats."""
    spans = locate_spans(tokenizer, prompt, thought, answer)
    ids = torch.tensor([spans.input_ids], device=model.device)
    first = spans.boundary.start  # first joint token; every joint token is predicted from its left
    positions = torch.arange(first - 1, ids.shape[1] - 1, device=model.device)
    logits = model(input_ids=ids, logits_to_keep=positions).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1).gather(1, ids[0, first:, None])[:, 0].double()
    n_answer = len(spans.answer)
    return {
        "answer_logprob": float(logprobs[len(logprobs) - n_answer:].sum()),
        "joint_logprob": float(logprobs.sum()),
        "n_answer_tokens": n_answer,
        "n_joint_tokens": len(logprobs),
    }


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
