"""A task file's catalog (docs/task-files.md): its rows in the profile's cells, in the builders' catalog form.

Each configured split's (family, level) cell takes its first `per_cell` rows in id order; a cell with fewer is
refused. A row without a split is placed by the split rule: the configured splits whose cells hold its family and
level; where several do (train and core IID share theirs), the cell's rule-placed rows in a seeded order of their
ids fill each split in the split table's order, after the rows that name it. Task metadata alone decides, never an
outcome. A derived split (rendering) holds its source split's rows under the second prompt template, as the
builders render it, with the id `<derived>-<the source id less its '<source>-' prefix>`. Rows with split
`probe` are the deployment probe's prompts (core/task_file/probe.py), never a catalog task.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import NamedTuple

import polars as pl

from apsft_dagster.core.balance import split_cells
from apsft_dagster.core.config import Config
from apsft_dagster.core.errors import TaskFileError
from apsft_dagster.core.seeds import seed64
from apsft_dagster.core.splits import CONFIGURED
from apsft_dagster.core.task_file.probe import probe_rows
from apsft_dagster.core.task_file.rows import PROBE, Row
from apsft_dagster.core.tasks.catalog import CATALOG_SCHEMA
from apsft_dagster.core.tasks.splits import DERIVED, render_second

Cell = tuple[str, str, int]  # (split, family, level)


class FileTasks(NamedTuple):
    catalog: pl.DataFrame  # every task of every split, derived ones included
    checks: dict[str, tuple[str, str]]  # {task id: (checker, answer)}
    probe: list[Row] | None  # the deployment probe's rows (core/task_file/probe.py); None: the builders' probe


def file_catalog(path: Path, rows: list[Row], config: Config) -> FileTasks:
    """The file's catalog, each task's check and the probe's rows."""
    _no_duplicates(path, rows)
    placed = _placed(path, rows, config)
    records, checks = [], {}
    for split in CONFIGURED:
        need = getattr(config.tasks, split).per_cell
        for family, level in split_cells(getattr(config.tasks, split)):
            found = sorted(placed.get((split, family, level), []), key=lambda r: r.id)
            if len(found) < need:
                raise TaskFileError(f"{path}: cell ({split}, {family}, L{level}) holds {len(found)} tasks but "
                                    f"tasks.{split}.per_cell is {need}; add rows to the cell or lower per_cell")
            for rank, row in enumerate(found[:need]):
                record = {"task_id": row.id, "split": split, "family": family, "level": level,
                          "index": rank if row.index is None else row.index, "seed": row.seed,
                          "prompt": row.prompt, "answer": row.answer, "solution": row.solution}
                records.append(record)
                checks[row.id] = (row.checker, row.answer)
                for derived in (d for d, source in DERIVED.items() if source == split):
                    tid = f"{derived}-{row.id.removeprefix(split + '-')}"
                    records.append({**record, "task_id": tid, "split": derived, "prompt": render_second(row.prompt)})
                    checks[tid] = (row.checker, row.answer)
    if len(checks) != len(records):
        clash = next(tid for tid, n in Counter(r["task_id"] for r in records).items() if n > 1)
        raise TaskFileError(f"{path}: field 'id': two tasks are {clash!r} (a derived split's id is "
                            "'<derived>-<source id less its split prefix>'); rename the row it clashes with")
    catalog = pl.DataFrame(records, schema=CATALOG_SCHEMA).sort("split", "task_id")
    return FileTasks(catalog, checks, probe_rows(path, rows, config, catalog))


def _no_duplicates(path: Path, rows: list[Row]) -> None:
    first: dict[str, int] = {}
    for row in rows:
        if row.id in first:
            raise TaskFileError(f"{path}: row {row.line}: field 'id': {row.id!r} is also row {first[row.id]}'s id; "
                                "give every task its own id")
        first[row.id] = row.line


def _placed(path: Path, rows: list[Row], config: Config) -> dict[Cell, list[Row]]:
    """Every row in the cell its split (or the split rule) puts it in."""
    declared = {name: split_cells(getattr(config.tasks, name)) for name in CONFIGURED}
    placed: dict[Cell, list[Row]] = defaultdict(list)
    by_rule: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for row in (r for r in rows if r.split != PROBE):  # probe rows are no catalog task
        cell = (row.family, row.level)
        if row.split is None:
            if not any(cell in cells for cells in declared.values()):
                raise TaskFileError(f"{path}: row {row.line}: field 'split': empty, and no split of the profile "
                                    f"declares ({row.family}, L{row.level}); write its split or declare the cell")
            by_rule[cell].append(row)
        elif cell not in declared[row.split]:
            split = getattr(config.tasks, row.split)
            raise TaskFileError(f"{path}: row {row.line}: field 'family' or 'level': ({row.family}, L{row.level}) "
                                f"is no cell of tasks.{row.split} (families {split.families}, levels {split.levels}); "
                                "remove the row or declare the cell")
        else:
            placed[(row.split, *cell)].append(row)
    for cell, waiting in by_rule.items():
        waiting.sort(key=lambda r: seed64("apsft-split", config.seeds.train_tasks, r.id))
        for name in (n for n in CONFIGURED if cell in declared[n]):
            room = max(0, getattr(config.tasks, name).per_cell - len(placed[(name, *cell)]))
            placed[(name, *cell)] += waiting[:room]
            waiting = waiting[room:]
    return placed
