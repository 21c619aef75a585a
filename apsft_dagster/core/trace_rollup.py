"""The trace bank's rollup: summary figures and the protocol checks over all task shards."""

from __future__ import annotations

import polars as pl

from apsft_dagster.core.balance import cell_problems, exactly_once, split_cells, tasks_per_cell
from apsft_dagster.core.config import Config


def summarize(bank: pl.DataFrame) -> dict:
    tasks = bank.group_by("task_id").agg(pl.col("task_excluded").first(), pl.col("batch").n_unique().alias("batches"))
    return {
        "tasks": tasks.height,
        "traces": bank.height,
        "thought_tokens": int(bank["n_thought_tokens"].sum()),
        "natural_closes": int(bank["closed"].sum()),
        "continuations": int(bank["continued"].sum()),
        "loops": int(bank["loop"].sum()),
        "eligible": int(bank["eligible"].sum()),
        "topup_batches": int((tasks["batches"] - 1).sum()),
        "excluded_tasks": sorted(tasks.filter("task_excluded")["task_id"].to_list()),
    }


def check_tasks_present(bank: pl.DataFrame, task_ids: list[str]) -> list[str]:
    """Every configured task present exactly once (as one shard's worth of rows), and no other."""
    tally = exactly_once(task_ids, bank["task_id"].unique())
    return [f"{t}: no shard" for t in tally.missing] + [f"{t}: not a configured train task" for t in tally.extra]


def check_cells(bank: pl.DataFrame, config: Config) -> list[str]:
    return cell_problems(tasks_per_cell(bank), split_cells(config.tasks.train))


def check_unique_trace_ids(bank: pl.DataFrame) -> list[str]:
    dup = bank.group_by("trace_id").len().filter(pl.col("len") > 1)
    return [f"{t}: {n} rows" for t, n in dup.sort("trace_id").iter_rows()]


def check_min_eligible(bank: pl.DataFrame, min_eligible: int) -> list[str]:
    per_task = bank.filter(~pl.col("task_excluded")).group_by("task_id").agg(pl.col("eligible").sum())
    short = per_task.filter(pl.col("eligible") < min_eligible).sort("task_id")
    return [f"{t}: {n} eligible traces, needs {min_eligible} (or must be marked excluded)"
            for t, n in short.iter_rows()]
