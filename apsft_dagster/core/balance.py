"""Two counting rules, each once: every (family, level) cell holds exactly its configured tasks
(`cell_problems`), and every expected key is found exactly k times, nothing else (`exactly_once`).

The catalog, the trace bank index, selection and the SFT manifest all ask the cell question of
different frames; they count differently (rows, distinct tasks, retained tasks, tasks with two
rows per arm) but judge the counts here. The banks' indexes, the seal, the trace audit and the
evaluations ask the key question (traces scored once, tasks generated once, k samples per task)
and word the answer in their own terms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Tally:
    """How often each key was found, judged against keys expected `k` times each."""

    missing: list[str]  # expected and never found, in the order expected
    wrong: list[tuple[str, int]]  # expected and found other than k times (0 included), in the order expected
    repeated: list[tuple[str, int]]  # any key found more than k times, sorted
    extra: list[str]  # found and not expected, sorted

    @property
    def ok(self) -> bool:
        return not (self.wrong or self.extra)


def exactly_once(expected: Iterable[str], found: Iterable[str], k: int = 1) -> Tally:
    """Every expected key found exactly `k` times (once, unless told), and no other key found."""
    counts = Counter(found)
    wanted = list(dict.fromkeys(expected))
    known = set(wanted)
    return Tally(missing=[key for key in wanted if not counts[key]],
                 wrong=[(key, counts[key]) for key in wanted if counts[key] != k],
                 repeated=sorted((key, n) for key, n in counts.items() if n > k),
                 extra=sorted(key for key in counts if key not in known))
