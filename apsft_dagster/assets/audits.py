"""SQL audits: one asset per `dbt_like_sql/*.sql`, its upstream assets read from the SQL itself."""

import dagster as dg
import polars as pl

from apsft_dagster.assets.common import OWNERS
from apsft_dagster.core.audits import Audit, discover, persist, run_audit
from apsft_dagster.core.store import json_scalar
from apsft_dagster.resources import ExperimentResource


def table_metadata(frame: pl.DataFrame) -> dg.MetadataValue:
    """The result as a UI table; nested values (structs, lists) shown as text."""
    schema = dg.TableSchema(columns=[dg.TableColumn(c, str(t)) for c, t in frame.schema.items()])
    records = [dg.TableRecord({k: json_scalar(v) for k, v in row.items()}) for row in frame.iter_rows(named=True)]
    return dg.MetadataValue.table(records=records, schema=schema)


def audit_asset(audit: Audit) -> dg.AssetsDefinition:
    @dg.asset(name=f"audit_{audit.name}", deps=audit.assets, description=audit.description,
              group_name="audits", kinds={"duckdb", "sql"}, owners=OWNERS)
    def _audit(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
        store = experiment.store()
        result = run_audit(audit, store)
        database = persist(store, {audit.name: result})
        context.log.info(f"{audit.name}: {result.height} rows -> {database}")
        return dg.MaterializeResult(metadata={
            "rows": result.height, "result": table_metadata(result), "views": ", ".join(audit.views),
            "duckdb": dg.MetadataValue.path(str(database)), "sql": dg.MetadataValue.md(f"```sql\n{audit.sql}\n```")})

    return _audit


_AUDITS = [(a.group, audit_asset(a)) for a in discover()]
audit_assets = [asset for group, asset in _AUDITS if group == "experiment"]
loss_mask_audit_assets = [asset for group, asset in _AUDITS if group == "loss_mask"]
run_report_audit_assets = [asset for group, asset in _AUDITS if group == "run_report"]
