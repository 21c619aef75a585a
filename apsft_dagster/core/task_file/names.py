"""The families and levels a split may name (docs/task-files.md): the builders' registry, or, when `tasks.source`
reads the tasks from a file, any family name (`[a-z][a-z0-9_]*`) and any level >= 1 (the file must hold every
cell the profile declares: core/task_file/catalog.py refuses an empty one).

`Split` (core/config/sections/tasks.py) keeps the builders' names (the domain of a profile without a source, what
core/domains.py and the protocol's table read); its wrap validator `split_members` widens them only while
`Tasks` with a source validates (`with_source` marks it). This module reads no config and no row.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class WithTaskFile:
    """A field's metadata: its domain with `tasks.source` set, in words (core/domains.py shows it in the protocol's
    table beside the type's own)."""

    with_task_file: str


FAMILY_NAME = re.compile(r"[a-z][a-z0-9_]*")
FILE_FAMILIES = WithTaskFile("any family name (`[a-z][a-z0-9_]*`) the file holds")
FILE_LEVELS = WithTaskFile("any integer >= 1 the file holds")
_FROM_FILE: ContextVar[bool] = ContextVar("apsft_tasks_from_file", default=False)


def with_source(cls, data, handler):
    """`Tasks`' wrap validator: its splits read a file's names while a source is set."""
    token = _FROM_FILE.set(isinstance(data, dict) and data.get("source") is not None)
    try:
        return handler(data)
    finally:
        _FROM_FILE.reset(token)


def split_members(cls, value, handler, info):
    """`Split.families` and `Split.levels`: the builders' (the declared Literal types), or a file's."""
    if not _FROM_FILE.get():
        return handler(value)
    families = info.field_name == "families"
    ok = (lambda v: type(v) is str and FAMILY_NAME.fullmatch(v)) if families else (lambda v: type(v) is int and v >= 1)
    if not isinstance(value, list) or not value or not all(ok(v) for v in value):
        what = "family names ([a-z][a-z0-9_]*, e.g. gsm_like)" if families else "levels (integers >= 1)"
        raise ValueError(f"with tasks.source, a list (at least 1) of {what} the task file holds (got {value!r})")
    return value


def unknown_cells(train) -> list[str]:
    """The families and levels (`L<level>`) of a split (tasks.train) the builders do not know, in its order: what
    the embedded model cannot pretrain on and the builders' probe cannot draw."""
    from apsft_dagster.core.tasks import BUILDERS, STEPS_BY_LEVEL  # here: loading the config loads no builder

    return ([f for f in train.families if f not in BUILDERS]
            + [f"L{lv}" for lv in train.levels if lv not in STEPS_BY_LEVEL])
