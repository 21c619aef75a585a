"""The training loss, on one screen (docs/PROTOCOL.md §11).

A record is `prompt + thought + "</think>\\n\\nANSWER:" + answer + end`, tokenized once. Each
token carries the loss weight of *predicting* it, by the segment holding its first character:
prompt 0.0 (and tokens with no source character), thought 0.5, boundary + answer + end 1.0.

For one record, `weighted_nll` gives (S, W) = (sum_t w[t] * -log p(token t | tokens < t), sum_t w[t])
over t >= 1. The loss of an optimizer step is the weighted mean over its accumulation window:

    loss = (S_1 + ... + S_k) / (W_1 + ... + W_k)

over the window's k records: not a mean of per-record means, not a division by a token count.
The training loop divides each record's S by the window's total W before backward, so the
accumulated gradient is exactly that of the window loss.

`chunked_nll` computes the same sums from the decoder's hidden states, a chunk of positions at a
time, with each chunk's gradient taken while its logits exist: full-vocabulary logits never
exist for a whole record (16,000 positions x 248k vocabulary would be ~8 GB in bf16), and no
chunk is computed twice.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from apsft_dagster.core.config import LossWeights
from apsft_dagster.core.text_protocol import active

DEFAULT_WEIGHTS = LossWeights(prompt=0.0, thought=0.5, answer=1.0)
# Loss segments: what each token's weight comes from. The end of turn counts as answer.
PROMPT, THOUGHT, ANSWER = 0, 1, 2
SEGMENT_NAMES = ("prompt", "thought", "boundary_answer")


def token_segments(tokenizer, prompt: str, thought: str, answer: str,
                   end: str | None = None) -> tuple[list[int], list[int]]:
    """(input_ids, loss segment of each token) of the whole record, tokenized once; `end`: the protocol's end of
    turn unless given."""
    protocol = active()
    spans = protocol.locate_spans(tokenizer, prompt, thought, answer, protocol.end if end is None else end)
    segments = ([PROMPT] * len(spans.prompt) + [THOUGHT] * len(spans.thought)
                + [ANSWER] * (len(spans.boundary) + len(spans.answer) + len(spans.end)))
    return spans.input_ids, segments


def token_weights(tokenizer, prompt: str, thought: str, answer: str, end: str | None = None, *,
                  loss_weights: LossWeights = DEFAULT_WEIGHTS) -> tuple[list[int], list[float]]:
    """(input_ids, weight of predicting each token): 0.0 prompt, 0.5 thought, 1.0 boundary/answer/end.

    `prompt` is the formatted x (`format_prompt`), `answer` the formatted y* (`format_answer`).
    """
    ids, segments = token_segments(tokenizer, prompt, thought, answer, end)
    by_segment = (loss_weights.prompt, loss_weights.thought, loss_weights.answer)
    return ids, [by_segment[s] for s in segments]


def weighted_nll(logits: torch.Tensor, input_ids: torch.Tensor,
                 weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence: logits [T, V], input_ids [T], weights [T] -> (sum_{t>=1} w[t] * nll[t], sum_{t>=1} w[t]),
    where nll[t] = -log softmax(logits[t-1])[input_ids[t]]. The reference the chunked loss must equal."""
    logprobs = torch.log_softmax(logits[:-1].float(), dim=-1)
    nll = -logprobs.gather(1, input_ids[1:, None].long())[:, 0]
    w = weights[1:].to(nll.dtype)
    return (w * nll).sum(), w.sum()


class _ChunkedWeightedNLL(torch.autograd.Function):
    """sum_t w[t] * nll[t] from hidden states, a chunk of positions at a time, gradients included.

    Forward computes each chunk's logits once and, while they exist, the gradients with respect
    to the hidden states (and the head's weight, if it is trained): (softmax - onehot) * w.
    Backward only scales them. Three matmuls per chunk at most, none repeated, and never more
    than `chunk` x V logits alive: the memory of chunking without the recomputation of
    activation checkpointing.
    """

    @staticmethod
    def forward(ctx, hidden, head_weight, targets, weights, chunk):
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        nll = torch.empty(targets.shape[0], dtype=torch.float32, device=hidden.device)
        grad_h = torch.zeros_like(hidden) if need_h else None
        grad_w = torch.zeros_like(head_weight, dtype=torch.float32) if need_w else None
        for start in range(0, targets.shape[0], chunk):
            stop = min(start + chunk, targets.shape[0])
            h, t, w = hidden[start:stop], targets[start:stop], weights[start:stop]
            logits = F.linear(h, head_weight).float()
            lse = torch.logsumexp(logits, dim=-1)
            nll[start:stop] = lse - logits.gather(1, t[:, None])[:, 0]
            total += (w * nll[start:stop]).sum()
            if need_h or need_w:
                g = torch.exp(logits - lse[:, None])  # softmax, in place of the logits
                g[torch.arange(stop - start, device=g.device), t] -= 1.0
                g *= w[:, None]
                if need_h:
                    grad_h[start:stop] = (g.to(head_weight.dtype) @ head_weight).to(hidden.dtype)
                if need_w:
                    grad_w += g.T @ h.float()
            del logits
        ctx.save_for_backward(*(x for x in (grad_h, grad_w) if x is not None))
        ctx.have, ctx.weight_dtype = (need_h, need_w), head_weight.dtype
        ctx.mark_non_differentiable(nll)
        return total, nll

    @staticmethod
    def backward(ctx, grad_total, _grad_nll):
        saved, (need_h, need_w) = iter(ctx.saved_tensors), ctx.have
        grad_h = next(saved) if need_h else None
        grad_w = next(saved) if need_w else None
        return (None if grad_h is None else grad_h * grad_total.to(grad_h.dtype),
                None if grad_w is None else (grad_w * grad_total).to(ctx.weight_dtype), None, None, None)


def chunked_nll(hidden: torch.Tensor, head_weight: torch.Tensor, input_ids: torch.Tensor, weights: torch.Tensor,
                chunk: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """From hidden states [T, H] (after the final norm) and the LM head's weight [V, H]:
    (weighted sum, weight sum, per-token nll [T-1] detached), equal to `weighted_nll` on the full
    logits, with its gradients; at most `chunk` x V logits exist at once."""
    hidden, targets, w = hidden[:-1], input_ids[1:].long(), weights[1:].float()  # position t-1 predicts token t
    total, nll = _ChunkedWeightedNLL.apply(hidden, head_weight, targets, w, chunk)
    return total, w.sum(), nll
