"""A task file's answer checkers (docs/task-files.md): how a parsed answer is judged against the row's answer.

A row's `checker` is one string (absent or null: `exact`):
- `exact`: the builders' rule, the parsed answer equals the row's answer normalized the same way;
- `numeric` or `numeric:TOL`: both read as numbers (commas dropped), correct within an absolute TOL (default 0);
- `regex:PATTERN`: the parsed answer matches PATTERN whole (`re.fullmatch`);
- `module:function`: an importable entry point called as `function(parsed, answer)`, returning a bool.
Every checker sees the parsed answer as core/tasks/answers.py's `parse_answer` gives it: whitespace removed, upper
case, no trailing period, never None (an unparsed completion is wrong before any checker runs).
"""

from __future__ import annotations

import functools
import importlib
import math
import re
from collections.abc import Callable

from apsft_dagster.core.tasks.answers import normalize_answer

Checker = Callable[[str, str], bool]  # (parsed, answer) -> correct
EXACT = "exact"
ENTRY_POINT = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def exact(parsed: str, answer: str) -> bool:
    return parsed == normalize_answer(answer)


def as_number(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def numeric(tolerance: float) -> Checker:
    def check(parsed: str, answer: str) -> bool:
        got, want = as_number(parsed), as_number(answer)
        if want is None:
            raise ValueError(f"the answer {answer!r} is not a number")
        return got is not None and abs(got - want) <= tolerance
    return check


def regex(pattern: str) -> Checker:
    compiled = re.compile(pattern)
    return lambda parsed, answer: compiled.fullmatch(parsed) is not None


@functools.cache
def checker(spec: str) -> Checker:
    """The checker a spec names; ValueError saying what is wrong and how to write it."""
    if spec == EXACT:
        return exact
    if spec == "numeric" or spec.startswith("numeric:"):
        tolerance = as_number(spec.removeprefix("numeric").removeprefix(":") or "0")
        if tolerance is None or tolerance < 0:
            raise ValueError(f"{spec!r}: the tolerance must be a number >= 0, e.g. 'numeric:0.01'")
        return numeric(tolerance)
    if spec.startswith("regex:"):
        try:
            return regex(spec.removeprefix("regex:"))
        except re.error as exc:
            raise ValueError(f"{spec!r}: not a regular expression ({exc}); fix the pattern") from None
    if ENTRY_POINT.fullmatch(spec):
        return _entry_point(spec)
    raise ValueError(f"{spec!r} is no checker; write 'exact', 'numeric[:TOL]', 'regex:PATTERN' or 'module:function'")


def _entry_point(spec: str) -> Checker:
    module, name = spec.split(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{spec!r}: cannot import ({exc}); put the module on PYTHONPATH or fix the name") from None
    if not callable(found):
        raise ValueError(f"{spec!r} is not callable; name a function(parsed, answer) -> bool")
    return found


def correct(parsed: str | None, canonical: str, check: Callable[[str], bool] | None = None) -> bool:
    """Whether a parsed answer is right: the builders' exact comparison with the canonical answer, or a task
    file's checker bound to its answer (core/task_file/source.py `answer_checks`); an unparsed one never is."""
    return parsed is not None and (parsed == canonical if check is None else check(parsed))


def judge(check: Checker, parsed: str, answer: str) -> bool:
    """The checker's verdict, which must be a bool (TypeError otherwise; whatever it raises goes through)."""
    verdict = check(parsed, answer)
    if not isinstance(verdict, bool):
        raise TypeError(f"returned {verdict!r}, not a bool")
    return verdict
