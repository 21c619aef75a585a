"""The task catalog: train and sealed eval splits fixed by task metadata, never by outcomes (the
split table is core/splits.py; how a derived split renders its source's tasks, core/tasks/splits.py)."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from apsft_dagster.core.balance import cell_problems, split_cells, tasks_per_cell
from apsft_dagster.core.config import Config, Split
from apsft_dagster.core.splits import CONFIGURED, SPLIT_TABLE
from apsft_dagster.core.tasks import Task, generate
from apsft_dagster.core.tasks.answers import ANSWER_TAG
from apsft_dagster.core.tasks.splits import DERIVED, render_second

SPLITS = CONFIGURED  # train, core_iid, core_hard, held_family: one `tasks:` block each (core/splits.py)
CATALOG_SPLITS = tuple(s.name for s in SPLIT_TABLE)
CATALOG_SCHEMA = {
    "task_id": pl.String, "split": pl.String, "family": pl.String, "level": pl.Int64,
    "index": pl.Int64, "seed": pl.Int64, "prompt": pl.String, "answer": pl.String, "solution": pl.String,
}


def task_id(split: str, family: str, level: int, index: int) -> str:
    """Sorts family -> level -> index, so every (family, level) cell is a contiguous id range."""
    core = f"{family}-L{level}-{index:03d}"
    return core if split == "train" else f"{split}-{core}"


def _cells(split: Split) -> Iterator[tuple[str, int, int]]:
    for family in split.families:
        for level in split.levels:
            for index in range(split.per_cell):
                yield family, level, index


def build_catalog(config: Config) -> pl.DataFrame:
    seeds = {"train": config.seeds.train_tasks}
    rows = []
    for name in SPLITS:
        seed = seeds.get(name, config.seeds.eval_tasks)
        for family, level, index in _cells(getattr(config.tasks, name)):
            task = generate(family, level, index, seed)
            rows.append({"task_id": task_id(name, family, level, index), "split": name, **_fields(task)})
            for derived in (d for d, source in DERIVED.items() if source == name):
                rows.append({**rows[-1], "task_id": task_id(derived, family, level, index), "split": derived,
                             "prompt": render_second(task.prompt)})
    return pl.DataFrame(rows, schema=CATALOG_SCHEMA).sort("split", "task_id")


def _fields(task: Task) -> dict:
    return {"family": task.family, "level": task.level, "index": task.index, "seed": task.seed,
            "prompt": task.prompt, "answer": task.answer, "solution": task.solution}


def train_task_ids(config: Config) -> list[str]:
    return sorted(task_id("train", f, lv, i) for f, lv, i in _cells(config.tasks.train))


def check_cell_counts(catalog: pl.DataFrame, config: Config) -> list[str]:
    """Every (split, family, level) cell holds exactly its configured count, and nothing else exists."""
    expected = {(name, *cell): n for name in SPLITS for cell, n in split_cells(getattr(config.tasks, name)).items()}
    expected |= {(derived, *cell): n for derived, source in DERIVED.items()
                 for cell, n in split_cells(getattr(config.tasks, source)).items()}
    return cell_problems(tasks_per_cell(catalog, ("split", "family", "level")), expected)


def check_firewall(catalog: pl.DataFrame) -> list[str]:
    """No eval prompt equals a train prompt."""
    train = catalog.filter(pl.col("split") == "train").select("prompt")
    leaks = catalog.filter(pl.col("split") != "train").join(train, on="prompt", how="semi")
    return [f"{tid}: eval prompt equals a train prompt" for tid in leaks["task_id"].to_list()]


def check_answer_not_in_prompt(catalog: pl.DataFrame) -> list[str]:
    """A prompt never carries its canonical answer as an `ANSWER:` line (answers are curation-only)."""
    leaked = catalog.filter(pl.col("prompt").str.contains(ANSWER_TAG, literal=True))
    return [f"{tid}: prompt contains '{ANSWER_TAG}'" for tid in leaked["task_id"].to_list()]
