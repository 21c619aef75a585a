"""A JSON file a trainer wrote: strict JSON (core/json_input.py) except that NaN and Infinity, which
Python's json module writes for a diverged value, read as missing values."""

from __future__ import annotations

from pathlib import Path

from apsft_dagster.core.json_input import parse_json
from apsft_dagster.core.run_report.folder import Reader, RunReportError, fail
from apsft_dagster.core.run_report.importers.metrics import WAY_OUT


def parse(data: bytes, where: str) -> object:
    return parse_json(data, where, RunReportError, parse_constant=lambda _: None)


def document(path: Path, reader: Reader, kind: type) -> dict | list:
    doc = parse(reader.read(path, WAY_OUT), str(path))
    if not isinstance(doc, kind):
        want = "object" if kind is dict else "array"
        raise fail(path, "(top level)", f"must be a JSON {want}, got {type(doc).__name__}", WAY_OUT)
    return doc
