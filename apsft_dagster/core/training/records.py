"""An arm's rows as training examples, and the exact order they are seen in.

Records are never packed or batched together (batch 1; Qwen3.5's linear attention would carry
state across packed sequences). Each epoch visits every row once in a seeded permutation of
(training seed, arm, epoch); the epochs' orders are concatenated and cut into accumulation
windows of `grad_accum` records, so a run takes exactly ceil(rows x epochs / grad_accum)
optimizer steps (the last window may be short).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from apsft_dagster.core.config import Training
from apsft_dagster.core.errors import TrainingError
from apsft_dagster.core.protocol import format_answer
from apsft_dagster.core.seeds import derive_seed
from apsft_dagster.core.text_protocol import active
from apsft_dagster.core.training.loss import token_segments


@dataclass(frozen=True)
class Example:
    row: int
    input_ids: tuple[int, ...]
    segments: tuple[int, ...]  # loss segment per token (loss.PROMPT / THOUGHT / ANSWER)
    weights: tuple[float, ...]
    truncated: bool

    @property
    def predicted_weight(self) -> float:
        """W of this record: the sum of weights of the tokens it predicts (t >= 1)."""
        return sum(self.weights[1:])


def encode_rows(rows: list[dict], tokenizer, training: Training) -> list[Example]:
    """Each row's record tokenized once with its loss segments, cut at `training.max_length`."""
    by_segment = (training.loss_weights.prompt, training.loss_weights.thought, training.loss_weights.answer)
    examples = []
    for i, row in enumerate(rows):
        ids, segments = token_segments(tokenizer, active().format_prompt(row["prompt"]), row["thought"],
                                       format_answer(row["answer"]))
        cut = len(ids) > training.max_length
        ids, segments = ids[:training.max_length], segments[:training.max_length]
        examples.append(Example(i, tuple(ids), tuple(segments), tuple(by_segment[s] for s in segments), cut))
    return examples


def epoch_order(n_rows: int, seed: int, arm: str, epoch: int) -> list[int]:
    order = list(range(n_rows))
    random.Random(derive_seed(seed, "training-order", arm, epoch)).shuffle(order)
    return order


def windows(n_rows: int, epochs: int, grad_accum: int, seed: int, arm: str) -> list[list[int]]:
    """Row indices of every optimizer step's accumulation window, in order."""
    stream = [row for epoch in range(epochs) for row in epoch_order(n_rows, seed, arm, epoch)]
    steps = [stream[i:i + grad_accum] for i in range(0, len(stream), grad_accum)]
    expected = math.ceil(n_rows * epochs / grad_accum)
    if len(steps) != expected:
        raise TrainingError(f"{arm}: {len(steps)} optimizer steps planned, expected ceil({n_rows} x {epochs} / "
                            f"{grad_accum}) = {expected}")
    return steps
