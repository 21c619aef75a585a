"""A task file's deployment-probe prompts (docs/task-files.md; the probe: docs/PROTOCOL.md §12).

The builders draw the probe's prompts from their own seed space (`seeds.probe_tasks`, core/training/probe.py).
A file whose train cells the builders do not know (a family or level of its own) gives them itself: its rows
with split `probe`, prompts of the train cells that are never a catalog task. The first `probe.prompts` of them
in id order are the probe; fewer are refused. A file that holds probe rows uses them even where the builders
could draw; a file without any, on the builders' cells, keeps the builders' probe (the same prompts as before).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from apsft_dagster.core.balance import split_cells
from apsft_dagster.core.config import Config
from apsft_dagster.core.errors import TaskFileError
from apsft_dagster.core.task_file.names import unknown_cells
from apsft_dagster.core.task_file.rows import PROBE, Row


def probe_rows(path: Path, rows: list[Row], config: Config, catalog: pl.DataFrame) -> list[Row] | None:
    """The file's probe rows the probe takes, or None where the builders' probe serves (no probe rows, and every
    train cell is the builders'); a TaskFileError naming the row, or the count and the fix."""
    probes = sorted((r for r in rows if r.split == PROBE), key=lambda r: r.id)
    unknown = unknown_cells(config.tasks.train)
    if not probes and not unknown:
        return None
    train, tasks, seen = config.tasks.train, dict(zip(catalog["prompt"], catalog["task_id"])), {}
    for row in probes:
        where = f"{path}: row {row.line}"
        if (row.family, row.level) not in split_cells(train):
            raise TaskFileError(f"{where}: field 'family' or 'level': a probe row is a prompt of a train cell, and "
                                f"({row.family}, L{row.level}) is none (tasks.train: families {train.families}, levels "
                                f"{train.levels}); fix the row")
        if row.prompt in tasks or row.prompt in seen:
            other = f"task {tasks[row.prompt]}'s" if row.prompt in tasks else f"row {seen[row.prompt]}'s"
            raise TaskFileError(f"{where}: field 'prompt': the same as {other} prompt; the probe never sees a "
                                "catalog task and asks each prompt once: write another prompt")
        seen[row.prompt] = row.line
    if len(probes) < (need := config.probe.prompts):
        why = (f"tasks.train names {unknown}, which the builders do not know, so they cannot draw the probe"
               if unknown else "a file that holds probe rows gives the whole probe")
        raise TaskFileError(f"{path}: field 'split': the deployment probe needs probe.prompts = {need} prompts and the "
                            f"file holds {len(probes)} rows with split {PROBE!r} ({why}); add rows with split: "
                            f"{PROBE} (prompts of the train cells, never a catalog task's) or lower probe.prompts")
    return probes[:need]
