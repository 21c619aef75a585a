"""What every family shares: the task record, the seeded RNG, and the level -> steps table."""

from __future__ import annotations

import random
from dataclasses import dataclass

from apsft_dagster.core.seeds import seed64

# Level L asks for this many reasoning steps (operations to apply) in every family; level 4 is "hard".
STEPS_BY_LEVEL = {1: 2, 2: 3, 3: 4, 4: 6}


@dataclass(frozen=True)
class Task:
    family: str
    level: int
    index: int
    seed: int
    prompt: str
    answer: str  # canonical, already normalized (see answers.normalize_answer)
    solution: str  # worked, step-by-step thought that ends on the answer


def task_rng(family: str, level: int, index: int, seed: int) -> random.Random:
    """An RNG derived from the task's identity only (no process state, no Python hash())."""
    return random.Random(seed64("apsft-task", family, level, index, seed))
