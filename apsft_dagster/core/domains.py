"""Every profile field's domain, read from the config model itself (never listed by hand).

`domains()` walks the sections' pydantic models and returns one `Domain` per leaf field: its
kind, its bounds (open or closed), its allowed set, whether null is allowed. The protocol's table
of ranges (docs/PROTOCOL.md, written by scripts/domain_table.py) and the property test that
draws values outside and inside each domain (tests/test_config_domains.py) both come from here,
so a new field is covered the moment it is declared.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

import annotated_types as at
from pydantic import BaseModel


@dataclass(frozen=True)
class Domain:
    """One field's allowed values: `kind` (integer, number, boolean, string, choice, list or mapping),
    bounds for numbers, `choices` for a set, `item` for a list."""

    field: str
    kind: str
    low: float | None = None
    low_open: bool = False
    high: float | None = None
    high_open: bool = False
    choices: tuple = ()
    item: Domain | None = None
    min_items: int = 0
    nullable: bool = False
    with_task_file: str = ""  # the domain with `tasks.source` set, where it differs (described, never drawn)

    def contains(self, value: Any) -> bool:
        """Whether the model's own checks of this field alone accept `value` (the test's oracle)."""
        if value is None:
            return self.nullable
        if self.kind == "boolean":
            return isinstance(value, bool)
        if self.kind == "string":
            return isinstance(value, str)
        if self.kind == "choice":
            return any(type(value) is type(c) and value == c for c in self.choices)
        if self.kind == "mapping":
            return isinstance(value, dict)
        if self.kind == "list":
            return isinstance(value, list) and len(value) >= self.min_items and all(
                self.item.contains(v) for v in value)
        return self._number(value)

    def _number(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float) or (
                self.kind == "integer" and not isinstance(value, int)):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def describe(self) -> str:
        """The domain in words, as the protocol's table shows it."""
        text = self._describe()
        text = f"{text}; with `tasks.source`: {self.with_task_file}" if self.with_task_file else text
        return f"{text}, or null" if self.nullable else text

    def _describe(self) -> str:
        if self.kind == "choice":
            return "one of " + ", ".join(f"`{c}`" for c in self.choices)
        if self.kind == "list":
            size = f" (at least {self.min_items})" if self.min_items else ""
            return f"list{size} of: {self.item.describe()}"
        if self.kind == "mapping":
            return "mapping of names to lists of strings"
        if self.kind in ("boolean", "string"):
            return self.kind
        word = "integer" if self.kind == "integer" else "finite number"
        if self.low is not None and self.high is not None:
            return f"{word} in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}" \
                   f"{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{word} {'>' if self.low_open else '>='} {_num(self.low)}"
        if self.high is not None:
            return f"{word} {'<' if self.high_open else '<='} {_num(self.high)}"
        return word


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def domains(model: type[BaseModel] | None = None, prefix: str = "") -> list[Domain]:
    """Every leaf field of `model` (default: the experiment's Config with its sibling sections),
    dotted from the top, in declaration order; nested sections (optional ones too) are walked."""
    if model is None:
        from apsft_dagster.core.config import Config

        model = Config
    found: list[Domain] = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        section = _section(info.annotation)
        if section is not None:
            found.extend(domains(section, f"{path}."))
        else:
            found.append(_domain(path, info.annotation, info.metadata))
    return found


def _section(annotation) -> type[BaseModel] | None:
    """The model a field holds (through an Optional), or None for a leaf."""
    for candidate in (annotation, *_union_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _union_args(annotation) -> tuple:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return ()


def _domain(path: str, annotation, metadata: list) -> Domain:
    nullable = False
    args = _union_args(annotation)
    if args:
        rest = [a for a in args if a is not type(None)]
        nullable, annotation = len(rest) < len(args), rest[0]
    metadata = list(metadata)
    while typing.get_origin(annotation) is typing.Annotated:
        annotation, *extra = typing.get_args(annotation)
        for info in extra:
            metadata.extend(getattr(info, "metadata", [info]))
    bounds = _bounds(metadata)
    origin = typing.get_origin(annotation)
    names = next((m for m in metadata if hasattr(m, "choices")), None)  # the builders' (config/sections/tasks.py)
    if names is not None:
        return Domain(path, "choice", choices=names.choices(), nullable=nullable)
    if origin is Literal:
        return Domain(path, "choice", choices=typing.get_args(annotation), nullable=nullable)
    if origin is list:
        (item,) = typing.get_args(annotation)
        # the wider domain with `tasks.source` set (core/task_file/names.py WithTaskFile); the type stays the domain
        wider = next((m.with_task_file for m in metadata if hasattr(m, "with_task_file")), "")
        return Domain(path, "list", item=_domain(f"{path}[]", item, []), min_items=bounds.get("min_items", 0),
                      nullable=nullable, with_task_file=wider)
    if origin is dict:
        return Domain(path, "mapping", nullable=nullable)
    kind = {bool: "boolean", int: "integer", float: "number", str: "string"}[annotation]
    bounds.pop("min_items", None)
    return Domain(path, kind, nullable=nullable, **bounds)


def _bounds(metadata: list) -> dict:
    out: dict = {}
    for m in metadata:
        if isinstance(m, at.Ge):
            out.update(low=m.ge, low_open=False)
        elif isinstance(m, at.Gt):
            out.update(low=m.gt, low_open=True)
        elif isinstance(m, at.Le):
            out.update(high=m.le, high_open=False)
        elif isinstance(m, at.Lt):
            out.update(high=m.lt, high_open=True)
        elif isinstance(m, at.MinLen):
            out["min_items"] = m.min_length
    return out


def domain_table(found: list[Domain] | None = None) -> str:
    """The Markdown table of every field and its domain (docs/PROTOCOL.md holds it verbatim)."""
    rows = ["| field | allowed values |", "|---|---|"]
    rows += [f"| `{d.field}` | {d.describe()} |" for d in (found if found is not None else domains())]
    return "\n".join(rows) + "\n"
