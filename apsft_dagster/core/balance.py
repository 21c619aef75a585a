"""The per-cell balance rule, once: every (family, level) cell holds exactly its configured tasks.

The catalog, the trace bank index, selection and the SFT manifest all ask the same question of
different frames; they count differently (rows, distinct tasks, retained tasks, tasks with two
rows per arm) but judge the counts here.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from apsft_dagster.core.config import Split

Cell = tuple  # (family, level), or (split, family, level) for the catalog


def split_cells(split: Split) -> dict[Cell, int]:
    """The cells a split declares, each with its task count."""
    return {(f, lv): split.per_cell for f in split.families for lv in split.levels}


def tasks_per_cell(frame: pl.DataFrame, by: tuple[str, ...] = ("family", "level")) -> dict[Cell, int]:
    """Distinct tasks per cell of a frame with a `task_id` column (a task may have many rows)."""
    grouped = frame.group_by(*by).agg(pl.col("task_id").n_unique().alias("tasks"))
    return {tuple(row[:-1]): row[-1] for row in grouped.iter_rows()}


def cell_problems(counts: Mapping[Cell, int], expected: Mapping[Cell, int], what: str = "tasks") -> list[str]:
    """Every expected cell holds its count, and no cell outside `expected` holds any."""
    problems = [f"{_name(cell)}: {counts.get(cell, 0)} {what}, expected {n}"
                for cell, n in sorted(expected.items()) if counts.get(cell, 0) != n]
    problems += [f"{_name(cell)}: {n} {what} in a cell the config does not declare"
                 for cell, n in sorted(counts.items()) if cell not in expected and n]
    return problems


def _name(cell: Cell) -> str:
    *head, level = cell
    return "(" + ", ".join([*map(str, head), f"L{level}"]) + ")"
