"""A task file's rows, read and checked one by one (docs/task-files.md): each row's fields, types and checker.

A row is refused by file, row number (JSONL: the line; Parquet: the row, from 1) and field, with the fix; nothing
reads past the first refusal. What the rows say together (duplicate ids, cells, splits) is core/task_file/catalog.py's.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from apsft_dagster.core.errors import TaskFileError
from apsft_dagster.core.json_input import parse_json
from apsft_dagster.core.splits import CONFIGURED, SPLIT
from apsft_dagster.core.task_file.checkers import EXACT, checker, judge
from apsft_dagster.core.tasks.answers import ANSWER_TAG, parse_answer

REQUIRED = {"id": str, "prompt": str, "answer": str, "family": str, "level": int}
OPTIONAL = {"split": str, "checker": str, "solution": str, "index": int, "seed": int}
COLUMNS = (*REQUIRED, *OPTIONAL)
PROBE = "probe"  # a deployment-probe prompt (core/task_file/probe.py), never a catalog task


@dataclass(frozen=True)
class Row:
    line: int  # JSONL line or Parquet row, from 1
    id: str
    prompt: str
    answer: str
    family: str
    level: int
    split: str | None  # None: the split rule places it
    checker: str
    solution: str
    index: int | None  # None: its rank in its cell
    seed: int


def read_rows(path: Path, data: bytes) -> list[Row]:
    """Every row of a `.jsonl` or `.parquet` task file's bytes, each checked."""
    return [check_row(path, line, raw) for line, raw in _records(path, data)]


def _records(path: Path, data: bytes) -> list[tuple[int, object]]:
    if path.suffix == ".jsonl":
        return [(n, parse_json(text, f"{path}: row {n}", TaskFileError))
                for n, text in enumerate(data.split(b"\n"), 1) if text.strip()]
    if path.suffix == ".parquet":
        try:
            frame = pl.read_parquet(io.BytesIO(data))
        except Exception as exc:  # polars raises several types for a bad file; all mean the same here
            raise TaskFileError(f"{path}: not a readable Parquet file ({exc}); rewrite it") from None
        return list(enumerate(frame.to_dicts(), 1))
    raise TaskFileError(f"{path}: a task file is .jsonl or .parquet; rename or convert it")


def check_row(path: Path, line: int, raw: object) -> Row:
    where = f"{path}: row {line}"
    if not isinstance(raw, dict):
        raise TaskFileError(f"{where}: not an object; write one JSON object per line")
    if unknown := sorted(set(raw) - set(COLUMNS)):
        raise TaskFileError(f"{where}: field {unknown[0]!r}: unknown column; the columns are {list(COLUMNS)}")
    for name, kind in (*REQUIRED.items(), *OPTIONAL.items()):
        value = raw.get(name)
        if value is None and name in REQUIRED:
            raise TaskFileError(f"{where}: field {name!r}: missing; every row needs {list(REQUIRED)}")
        if value is not None and (type(value) is not kind or (kind is str and not value.strip())):
            raise TaskFileError(f"{where}: field {name!r}: {value!r} is not a non-empty {kind.__name__}; fix it")
    row = Row(line=line, id=raw["id"], prompt=raw["prompt"], answer=raw["answer"], family=raw["family"],
              level=raw["level"], split=raw.get("split"), checker=raw.get("checker") or EXACT,
              solution=raw.get("solution") or "", index=raw.get("index"), seed=raw.get("seed") or 0)
    _check_values(where, row)
    return row


def _check_values(where: str, row: Row) -> None:
    if row.level < 1 or (row.index is not None and row.index < 0) or row.seed < 0:
        raise TaskFileError(f"{where}: field 'level', 'index' or 'seed': level is >= 1, index and seed >= 0; fix it")
    if row.split is not None and row.split not in (*CONFIGURED, PROBE):
        source = SPLIT[row.split].derived_from if row.split in SPLIT else None
        fix = (f"it is derived from {source}: leave its rows out" if source
               else f"write one of {[*CONFIGURED, PROBE]}, or leave it empty for the split rule")
        raise TaskFileError(f"{where}: field 'split': {row.split!r} is not a split a file holds; {fix}")
    if "\n" in row.answer.strip() or ANSWER_TAG in row.prompt:
        raise TaskFileError(f"{where}: field 'answer' or 'prompt': the answer is one line and the prompt never "
                            f"carries '{ANSWER_TAG}'; fix the row")
    try:
        check = checker(row.checker)
    except ValueError as exc:
        raise TaskFileError(f"{where}: field 'checker': {exc}") from None
    parsed = parse_answer(ANSWER_TAG + " " + row.answer)
    try:
        ok = parsed is not None and judge(check, parsed, row.answer)
    except Exception as exc:  # a user's checker may raise anything: refused by row, never let through
        raise TaskFileError(f"{where}: field 'checker': {row.checker!r} raised {type(exc).__name__}: {exc} on the "
                            "row's own answer; fix the checker or the answer") from None
    if not ok:
        raise TaskFileError(f"{where}: field 'answer': {row.answer!r} is judged wrong by its own checker "
                            f"{row.checker!r}; a row's answer must pass its checker")
