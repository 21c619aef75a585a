"""Procedural task families: `generate(family, level, index, seed)` -> Task.

| family | reasoning | answer |
|---|---|---|
| caravan | two goods tracked over stops: sales, purchases, trades, storm halving | integer |
| foundry_ledger | ingot batch: defect scrapping, drawing into rods, transfers, kiln splits | integer |
| runeward | ordered rewrite wards, each applied once to the leftmost match | rune string |
| brinework (held) | salt/water through dilution, evaporation, mixing, draining; reduced ratio | `a:b` |
| spindle (held) | dial pointer through modular turns, repeated turns, opposite jumps, mirrors | integer |

Level L applies STEPS_BY_LEVEL[L] operations; some operations only appear from level 2 or 3.
"""

from __future__ import annotations

from apsft_dagster.core.errors import TaskGenerationError
from apsft_dagster.core.tasks import brinework, caravan, foundry_ledger, runeward, spindle
from apsft_dagster.core.tasks.answers import is_correct, normalize_answer, parse_answer
from apsft_dagster.core.tasks.base import STEPS_BY_LEVEL, Task, task_rng

BUILDERS = {
    "caravan": caravan.build,
    "foundry_ledger": foundry_ledger.build,
    "runeward": runeward.build,
    "brinework": brinework.build,
    "spindle": spindle.build,
}


def generate(family: str, level: int, index: int, seed: int) -> Task:
    if family not in BUILDERS:
        raise TaskGenerationError(f"family {family!r} is unknown; known families are {sorted(BUILDERS)}")
    if level not in STEPS_BY_LEVEL:
        raise TaskGenerationError(f"{family}: level {level} is outside {sorted(STEPS_BY_LEVEL)}")
    rng = task_rng(family, level, index, seed)
    prompt, answer, solution = BUILDERS[family](rng, level, STEPS_BY_LEVEL[level])
    return Task(family, level, index, seed, prompt, normalize_answer(answer), solution)


__all__ = ["BUILDERS", "STEPS_BY_LEVEL", "Task", "generate", "is_correct", "normalize_answer", "parse_answer"]
