"""Judging and summarising parsed evaluation tables: every task generated once (`coverage_problems`),
k samples per task (`sample_problems`), the parsed table itself and its figures."""

from __future__ import annotations

import polars as pl

from apsft_dagster.core.balance import exactly_once
from apsft_dagster.core.config import LoopThresholds
from apsft_dagster.core.evaluation.parse import Checks, eval_table
from apsft_dagster.core.policies import arm_and_seed


def coverage_problems(policy: str, generated: list[str], wanted: list[str], stage: str = "Stage A") -> list[str]:
    """Each wanted task generated exactly once, and no other task."""
    tally = exactly_once(sorted(wanted), generated)
    return ([f"{policy}: task {t} generated more than once" for t, _ in tally.repeated[:10]]
            + [f"{policy}: task {t} has no generation" for t in tally.missing[:10]]
            + [f"{policy}: task {t} is not a {stage} task" for t in tally.extra[:10]])


def sample_problems(policy: str, samples: pl.DataFrame, wanted: list[str], k: int) -> list[str]:
    """Exactly k samples for each wanted task, and none for another."""
    tally = exactly_once(wanted, samples["task_id"], k=k)
    return ([f"{policy}: task {t} has {n} samples, expected {k}" for t, n in tally.wrong][:10]
            + [f"{policy}: task {t} is not a Stage B task" for t in tally.extra[:10]])


def parsed_table(policy: str, generations: pl.DataFrame, tasks: pl.DataFrame, tokenizer, loop: LoopThresholds,
                 stage: str = "Stage A", checks: Checks = None) -> tuple[pl.DataFrame | None, list[str]]:
    """(the policy's evaluation table, or None, and the coverage problems that stopped it); `checks`: a task
    file's checkers (None: the exact comparison)."""
    found = coverage_problems(policy, generations["task_id"].to_list(), tasks["task_id"].to_list(), stage)
    if found:
        return None, found
    arm, seed = arm_and_seed(policy)
    return eval_table(policy, arm, seed, generations, tasks, tokenizer, loop, checks), []


def table_figures(table: pl.DataFrame) -> dict:
    """A parsed table's figures for the metadata: accuracy (all, per split) and the three rates."""
    by_split = table.group_by("split").agg(pl.col("correct").mean()).sort("split")
    return {"accuracy": float(table["correct"].mean()),
            **{f"accuracy_{s}": round(float(a), 4) for s, a in by_split.iter_rows()},
            "parse_rate": float(table["parsed"].mean()), "close_rate": float(table["closed"].mean()),
            "loop_rate": float(table["loop"].mean())}
