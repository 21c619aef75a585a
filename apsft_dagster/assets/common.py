"""Small helpers every asset module shares."""

from __future__ import annotations

import dagster as dg
import polars as pl

OWNERS = ["team:apsft"]


def check_result(name: str, problems: list[str]) -> dg.AssetCheckResult:
    """ERROR severity: a failed protocol check blocks every downstream stage."""
    return dg.AssetCheckResult(
        check_name=name, passed=not problems, severity=dg.AssetCheckSeverity.ERROR,
        metadata={"problems": len(problems), "first_problems": "\n".join(problems[:20]) or "none"},
    )


def table_preview(frame: pl.DataFrame, rows: int = 10) -> dg.MetadataValue:
    return dg.MetadataValue.md(_markdown(frame.head(rows)))


def _markdown(frame: pl.DataFrame) -> str:
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join([header, rule, *body])
