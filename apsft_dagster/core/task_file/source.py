"""Where a profile's tasks come from (docs/task-files.md): the builders (core/tasks/), or the task file that
`tasks.source` names, pinned by `tasks.source_sha256`. Every reader of the catalog, the train task ids, the
answer checks and the deployment probe's prompts asks here, so the builders' code (the embedded model's build
code) never changes for a file.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import polars as pl

from apsft_dagster.core.config import Config
from apsft_dagster.core.errors import ConfigError, TaskFileError
from apsft_dagster.core.task_file.catalog import FileTasks, file_catalog
from apsft_dagster.core.task_file.checkers import checker, judge
from apsft_dagster.core.task_file.pin import verified
from apsft_dagster.core.task_file.rows import Row, read_rows
from apsft_dagster.core.tasks.catalog import build_catalog
from apsft_dagster.core.tasks.catalog import train_task_ids as builders_train_ids

AnswerCheck = Callable[[str], bool]  # a task's checker bound to its answer: parsed answer -> correct


def task_file(config: Config) -> Path:
    if config._task_file is None:
        raise ConfigError(f"profile {config.profile}: tasks.source is not bound to a file; load profiles with "
                          "load_config")
    return config._task_file


def task_catalog(config: Config) -> pl.DataFrame:
    """The catalog (core/tasks/catalog.py's columns): the builders', or the task file's."""
    if config.tasks.source is None:
        return build_catalog(config)
    return _file_catalog(config)[0]


def train_task_ids(config: Config) -> list[str]:
    if config.tasks.source is None:
        return builders_train_ids(config)
    return sorted(_file_catalog(config)[0].filter(pl.col("split") == "train")["task_id"].to_list())


def answer_checks(config: Config) -> dict[str, AnswerCheck] | None:
    """Each task's checker bound to its answer, or None for the builders (their exact comparison, as before)."""
    if config.tasks.source is None:
        return None
    path = task_file(config)
    return {tid: functools.partial(_check, path, tid, spec, answer)
            for tid, (spec, answer) in _file_catalog(config)[1].items()}


def checker_specs(config: Config) -> dict[str, str] | None:
    """Each task's checker as the file writes it, or None for the builders."""
    if config.tasks.source is None:
        return None
    return {tid: spec for tid, (spec, _) in _file_catalog(config)[1].items()}


def probe_rows(config: Config) -> list[Row] | None:
    """The task file's deployment-probe rows (core/task_file/probe.py), or None: the builders' probe serves."""
    if config.tasks.source is None:
        return None
    return _file_catalog(config).probe


def probe_prompts(config: Config) -> list[str] | None:
    """The deployment probe's prompts where the task file gives them, or None (core/training/probe.py draws)."""
    rows = probe_rows(config)
    return None if rows is None else [row.prompt for row in rows]


def _check(path: Path, task_id: str, spec: str, answer: str, parsed: str) -> bool:
    try:
        return judge(checker(spec), parsed, answer)
    except Exception as exc:  # a user's checker may raise anything: stop, naming the task and the checker
        raise TaskFileError(f"{path}: task {task_id}: checker {spec!r} raised {type(exc).__name__}: {exc} on the "
                            f"parsed answer {parsed!r}; fix the checker so it returns False instead") from None


_READ: dict[tuple[str, str, str], FileTasks] = {}  # one read per file


def _file_catalog(config: Config) -> FileTasks:
    """The file's catalog, each task's check and the probe's rows, read and verified once per process and profile."""
    path, sha256 = task_file(config), config.tasks.source_sha256
    key = (str(path), sha256, config.tasks.model_dump_json() + config.seeds.model_dump_json()
           + config.probe.model_dump_json())
    if key not in _READ:
        _READ[key] = file_catalog(path, read_rows(path, verified(path, sha256, f"profile {config.profile}")), config)
    return _READ[key]
