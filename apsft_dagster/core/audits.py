"""SQL audits: one DuckDB statement per `dbt_like_sql/*.sql` file, over named views of the store.

The views a statement reads are found by DuckDB's own parser (`json_serialize_sql`: every
BASE_TABLE that is not one of the statement's CTEs), so each audit's upstream assets come from
its SQL. Views are created only for what a statement reads, over the Parquet/JSON artifacts
as they are on disk. Results are returned as Polars frames and kept in `audits.duckdb` in the
profile's store, one table per audit (replaced on each run, under a file lock).
"""

from __future__ import annotations

import errno
import fcntl
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from apsft_dagster.core.errors import AuditError, MissingArtifactError
from apsft_dagster.core.layout import (
    AUDIT_DATABASE,
    PARITY_GATE,
    R1_BANK,
    SCORE_BANK,
    SFT_MANIFEST,
    TASK_CATALOG,
    TRACE_BANK,
    arm_rows,
    eval_table,
    shards_glob,
)
from apsft_dagster.core.loss_mask.names import VIEWS as LOSS_MASK_VIEWS
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.run_report.names import VIEWS as RUN_REPORT_VIEWS
from apsft_dagster.core.selection.arms import ARM_TABLE
from apsft_dagster.core.store import Store, write_failed

AUDIT_DIR = PROJECT_ROOT / "dbt_like_sql"

# view -> (the asset that writes its files, the files (relative to the store), the view's SELECT over
# `{files}`): the experiment's views here, each sibling system's in its own names module
EXPERIMENT_VIEWS = {
    "task_catalog": ("task_catalog", TASK_CATALOG, "select * from read_parquet({files})"),
    "trace_bank": ("trace_bank_index", shards_glob(TRACE_BANK),
                   "select * exclude (token_ids) from read_parquet({files})"),
    "score_bank": ("score_bank_index", shards_glob(SCORE_BANK), "select * from read_parquet({files})"),
    "r1_labels": ("r1_labels_index", shards_glob(R1_BANK), "select * from read_parquet({files})"),
    "parity_gate": ("parity_gate", PARITY_GATE, "select * from read_json({files})"),
    "sft_rows": ("sft_arms", arm_rows("*"), "select * from read_parquet({files}, union_by_name = true)"),
    "sft_manifest": ("sft_manifest", SFT_MANIFEST, "select unnest(arms, max_depth := 2) from read_json({files})"),
    # every evaluated policy's Stage A table, one row per (policy, task)
    "stage_a_eval": ("stage_a_eval", eval_table("*"), "select * from read_parquet({files}, union_by_name = true)"),
}
VIEWS = {**EXPERIMENT_VIEWS, **LOSS_MASK_VIEWS, **RUN_REPORT_VIEWS}


def _arm_table() -> str:
    rows = ", ".join(f"('{a.name}', '{a.role}', '{a.rows}', {str(a.balanced).lower()}, "
                     f"{str(a.sampled_in_stage_b).lower()})" for a in ARM_TABLE)
    return f"select * from (values {rows}) t(arm, role, row_rule, balanced, sampled_in_stage_b)"


# views over the project's own tables, not over files (no asset writes them): the arm table
TABLE_VIEWS = {"arms": _arm_table()}


@dataclass(frozen=True)
class Audit:
    name: str
    path: Path
    sql: str
    views: tuple[str, ...]
    description: str

    @property
    def assets(self) -> list[str]:
        return sorted({VIEWS[v][0] for v in self.views if v in VIEWS})


def referenced_tables(sql: str, source: str = "<sql>") -> tuple[str, ...]:
    """Tables one statement reads, from DuckDB's parse tree (CTE names excluded)."""
    tree = json.loads(duckdb.execute("select json_serialize_sql(?)", [sql]).fetchone()[0])
    if tree.get("error"):
        raise AuditError(f"{source}: DuckDB cannot parse it: {tree.get('error_message')}")
    if len(tree["statements"]) != 1:
        raise AuditError(f"{source}: holds {len(tree['statements'])} statements; an audit is exactly one")
    tables, ctes = set(), set()

    def walk(node) -> None:
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE":
                tables.add(node["table_name"])
            for entry in node.get("cte_map", {}).get("map", []) if isinstance(node.get("cte_map"), dict) else []:
                ctes.add(entry["key"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(tree["statements"][0])
    return tuple(sorted(tables - ctes))


def load_audit(path: Path) -> Audit:
    sql = path.read_text()
    views = referenced_tables(sql, str(path))
    unknown = sorted(set(views) - set(VIEWS) - set(TABLE_VIEWS))
    if unknown:
        raise AuditError(f"{path}: reads {unknown}, which are not views; known views are "
                         f"{sorted([*VIEWS, *TABLE_VIEWS])}")
    comment = [line.removeprefix("--").strip() for line in sql.splitlines() if line.startswith("--")]
    return Audit(path.stem, path, sql, views, " ".join(comment))


def discover(directory: Path = AUDIT_DIR) -> list[Audit]:
    return [load_audit(p) for p in sorted(directory.glob("*.sql"))]


def connect(store: Store, views: tuple[str, ...]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for view in views:
        if view in TABLE_VIEWS:
            con.execute(f"create or replace temp view {view} as {TABLE_VIEWS[view]}")
            continue
        asset, files, select = VIEWS[view]
        if not store.local_files(files):
            raise MissingArtifactError(f"view {view}: no files {store.root / files}; materialize `{asset}` first")
        pattern = (store.root / files).as_posix().replace("'", "''")
        con.execute(f"create or replace temp view {view} as " + select.format(files=f"'{pattern}'"))
    return con


def run_audit(audit: Audit, store: Store) -> pl.DataFrame:
    con = connect(store, audit.views)
    try:
        cursor = con.execute(audit.sql)
        columns = [d[0] for d in cursor.description]
        return pl.DataFrame(cursor.fetchall(), schema=columns, orient="row", infer_schema_length=None)
    finally:
        con.close()


def persist(store: Store, results: dict[str, pl.DataFrame]) -> Path:
    """Replace one table per audit in the store's DuckDB file (a lock file serializes writers)."""
    path = store.path(AUDIT_DATABASE)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            con = duckdb.connect(str(path))
            try:
                with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
                    for name, frame in results.items():  # via Parquet: exact types, no pyarrow needed
                        staged = Path(tmp) / f"{name}.parquet"
                        frame.write_parquet(staged)
                        con.execute(f"create or replace table \"{name}\" as select * from read_parquet(?)",
                                    [str(staged)])
            finally:
                con.close()
        except (OSError, pl.exceptions.ComputeError, duckdb.Error) as exc:  # e.g. a full disk: each table
            raise write_failed(path, OSError(errno.EIO, str(exc))) from exc  # replace is its own transaction
    return path
