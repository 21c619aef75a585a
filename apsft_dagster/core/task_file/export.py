"""A profile's tasks written as a task file (`apsft export-tasks`, docs/task-files.md): the configured splits'
rows (a derived split is rendered again on load), in the catalog's order, then a task file's probe rows, as JSONL
or Parquet."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl

from apsft_dagster.core.config import Config
from apsft_dagster.core.errors import TaskFileError
from apsft_dagster.core.splits import CONFIGURED
from apsft_dagster.core.store import parquet_bytes, write_atomic
from apsft_dagster.core.task_file.source import checker_specs, probe_rows, task_catalog

FILE_COLUMNS = ("id", "split", "family", "level", "index", "seed", "prompt", "answer", "solution")


def task_rows(config: Config) -> pl.DataFrame:
    """The profile's tasks as task-file rows (with each row's checker where the profile reads a file)."""
    rows = task_catalog(config).filter(pl.col("split").is_in(CONFIGURED)).rename({"task_id": "id"})
    rows = rows.select(FILE_COLUMNS)
    if (specs := checker_specs(config)) is not None:
        rows = rows.with_columns(checker=pl.col("id").replace_strict(specs, return_dtype=pl.String))
    if probe := probe_rows(config):  # the file's probe rows the probe takes, after the tasks
        rows = pl.concat([rows, pl.DataFrame(
            [{"id": r.id, "split": r.split, "family": r.family, "level": r.level,
              "index": rank if r.index is None else r.index, "seed": r.seed, "prompt": r.prompt, "answer": r.answer,
              "solution": r.solution, "checker": r.checker} for rank, r in enumerate(probe)], schema=rows.schema)])
    return rows


def file_bytes(rows: pl.DataFrame, suffix: str) -> bytes:
    if suffix == ".jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows.iter_rows(named=True)).encode()
    if suffix == ".parquet":
        return parquet_bytes(rows)
    raise TaskFileError(f"{suffix or '(no suffix)'}: a task file is .jsonl or .parquet; name the output so")


def export_tasks(config: Config, out: Path) -> tuple[int, str]:
    """Write the task file at `out` (atomically; nothing on a refusal): (rows, its SHA-256)."""
    rows = task_rows(config)
    data = file_bytes(rows, out.suffix)
    write_atomic(out, data)
    return rows.height, hashlib.sha256(data).hexdigest()
