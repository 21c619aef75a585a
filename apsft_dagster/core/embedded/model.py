"""The embedded policy's pretraining: a tiny causal LM (core/embedded/layout.py) on worked solutions.

The loop is nanoGPT-plain on purpose: fixed step count (not wall time) so the result is a pure
function of the config; AdamW with linear warmup and cosine decay; loss only on the assistant
turn (thought, boundary, answer, end of turn), since the prompt is given at deployment.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

import torch

from apsft_dagster.core.config import Embedded
from apsft_dagster.core.protocol import IM_END, format_answer, format_prompt, format_thought, locate_spans
from apsft_dagster.core.tasks import Task

IGNORE = -100


def encode_examples(tasks: Sequence[Task], tokenizer) -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) per task; labels mask the prompt so only the assistant turn is learned."""
    examples = []
    for task in tasks:
        spans = locate_spans(tokenizer, format_prompt(task.prompt), format_thought(task.solution),
                             format_answer(task.answer), IM_END)
        ids = spans.input_ids
        labels = [IGNORE] * spans.thought.start + ids[spans.thought.start:]
        examples.append((ids, labels))
    return examples


def _batch(examples, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), width), pad_id)
    labels = torch.full((len(examples), width), IGNORE)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (x, y) in enumerate(examples):
        ids[row, :len(x)] = torch.tensor(x)
        labels[row, :len(y)] = torch.tensor(y)
        mask[row, :len(x)] = 1
    return ids, labels, mask


def learning_rate(step: int, cfg: Embedded) -> float:
    if step < cfg.warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.train_steps - cfg.warmup_steps)
    return cfg.learning_rate * 0.5 * (1 + math.cos(math.pi * progress))


def pretrain(model, examples, cfg: Embedded, seed: int, pad_id: int,
             progress: Callable[[int, float], None] | None = None) -> list[float]:
    """Fixed-step AdamW over shuffled epochs of `examples`; returns the per-step loss."""
    order_rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, betas=(0.9, 0.95),
                                  weight_decay=cfg.weight_decay)
    model.train()
    order: list[int] = []
    losses = []
    for step in range(cfg.train_steps):
        if len(order) < cfg.batch_size:
            fresh = list(range(len(examples)))
            order_rng.shuffle(fresh)
            order += fresh
        picked, order = order[:cfg.batch_size], order[cfg.batch_size:]
        ids, labels, mask = _batch([examples[i] for i in picked], pad_id)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, cfg)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step, losses[-1])
    model.eval()
    return losses
