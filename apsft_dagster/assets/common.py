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


def load_shards(store, bank: str, task_ids: list[str], schema: dict) -> tuple[pl.DataFrame, list[str]]:
    """Every present shard of a bank that verifies, concatenated; and the hash-parity problems."""
    from apsft_dagster.core.bank import shard_name
    from apsft_dagster.core.errors import HashMismatchError

    frames, parity = [pl.DataFrame(schema=schema)], []
    for task_id in task_ids:
        name = shard_name(bank, task_id)
        if not store.exists(name):
            continue
        try:
            frames.append(store.get_parquet(name))
        except HashMismatchError as exc:  # names the shard; reported by the check, not raised
            parity.append(str(exc))
    return pl.concat(frames), parity
