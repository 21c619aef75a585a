"""SQL audits: one asset per `dbt_like_sql/*.sql`, its upstream assets read from the SQL itself,
scheduled by `place_audits` into the first stage that hosts audits after its inputs are written."""

import dataclasses
from collections.abc import Sequence

import dagster as dg
import polars as pl

from apsft_dagster.assets.common import OWNERS
from apsft_dagster.core.audits import Audit, discover, persist, run_audit
from apsft_dagster.core.errors import AuditError
from apsft_dagster.core.store import json_scalar
from apsft_dagster.resources import ExperimentResource
from apsft_dagster.stage import Stage


def table_metadata(frame: pl.DataFrame) -> dg.MetadataValue:
    """The result as a UI table; nested values (structs, lists) shown as text."""
    schema = dg.TableSchema(columns=[dg.TableColumn(c, str(t)) for c, t in frame.schema.items()])
    records = [dg.TableRecord({k: json_scalar(v) for k, v in row.items()}) for row in frame.iter_rows(named=True)]
    return dg.MetadataValue.table(records=records, schema=schema)


def audit_asset(audit: Audit, ran_by: str | None = None, group: str = "audits") -> dg.AssetsDefinition:
    """`ran_by`: the command that materializes it, said in its description, so a catalog where it is
    not materialized says why; `group`: its asset group (a sibling system's audits sit in that
    system's group, not among the experiment's)."""
    description = audit.description + (f"\n\nMaterialized by {ran_by}." if ran_by else "")

    @dg.asset(name=f"audit_{audit.name}", deps=audit.assets, description=description,
              group_name=group, kinds={"duckdb", "sql"}, owners=OWNERS)
    def _audit(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
        store = experiment.store()
        result = run_audit(audit, store)
        database = persist(store, {audit.name: result})
        context.log.info(f"{audit.name}: {result.height} rows -> {database}")
        return dg.MaterializeResult(metadata={
            "rows": result.height, "result": table_metadata(result), "views": ", ".join(audit.views),
            "duckdb": dg.MetadataValue.path(str(database)), "sql": dg.MetadataValue.md(f"```sql\n{audit.sql}\n```")})

    return _audit


AUDITS = discover()  # dbt_like_sql/ read once per process; every wing places its own from it


def place_audits(stages: Sequence[Stage], audits: Sequence[Audit] | None = None,
                 ran_by: str | None = None, group: str = "audits") -> tuple[Stage, ...]:
    """A wing's stages with its SQL audits placed: each audit whose inputs this wing writes joins the
    first stage marked `hosts_audits` at or after the last stage that writes one of them, so its
    views exist when it runs. Audits over another wing's assets are left to that wing; an audit
    that reads from two wings, or whose inputs are written after the last hosting stage, is refused
    at load (AuditError naming the SQL file). A hosting stage that holds no asset is dropped.
    `ran_by` and `group` as for `audit_asset`."""
    stages = list(stages)
    writer = {a.key.to_user_string(): i for i, stage in enumerate(stages) for a in stage.assets}
    placed: dict[int, list[dg.AssetsDefinition]] = {}
    for audit in AUDITS if audits is None else audits:
        ours = [a for a in audit.assets if a in writer]
        if not ours:
            continue
        if len(ours) != len(audit.assets):
            raise AuditError(f"{audit.path}: reads {sorted(set(audit.assets) - set(ours))} from another system "
                             f"beside {ours}; an audit reads one system's views")
        last = max(writer[a] for a in ours)
        host = next((i for i in range(last, len(stages)) if stages[i].hosts_audits), None)
        if host is None:
            raise AuditError(f"{audit.path}: its inputs are written by {stages[last].job}, after every stage "
                             "that hosts audits; mark a later stage hosts_audits=True")
        placed.setdefault(host, []).append(audit_asset(audit, ran_by, group))
    out = [dataclasses.replace(s, assets=(*s.assets, *placed.get(i, ()))) for i, s in enumerate(stages)]
    return tuple(s for s in out if s.assets)
