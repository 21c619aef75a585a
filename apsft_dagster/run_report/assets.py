"""the RL run report, partitioned by run id: the evidence (tables, hack signals per
sample, matched pairs, the verdict) and the report (Markdown and plots through the store)."""

import dagster as dg
import polars as pl

from apsft_dagster.assets.common import (
    OWNERS,
    blocking_checks,
    check_result,
    png_markdown,
    report_markdown,
    table_preview,
)
from apsft_dagster.core.run_report import (
    best_checkpoints,
    build_report,
    cost_table,
    eval_table,
    hack_rates,
    load_run,
    matched_pairs,
    verdict,
)
from apsft_dagster.core.run_report.folder import NOT_RECORDED
from apsft_dagster.core.run_report.ingest import RunReportError
from apsft_dagster.core.run_report.names import GROUP, rl_file
from apsft_dagster.core.run_report.registry import check_unchanged, registered
from apsft_dagster.core.run_report.samples import sample_table
from apsft_dagster.core.run_report.settings import run_report_settings
from apsft_dagster.core.run_report.signal_registry import selected_signals
from apsft_dagster.core.store import json_scalar
from apsft_dagster.resources import ExperimentResource
from apsft_dagster.run_report.partitions import rl_run_partitions


def _plain(value):
    """Decimals and other scalars as JSON-ready values, recursively."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return json_scalar(value)  # scalars as they are; Decimal costs as their exact text


def _source(run) -> dict:
    """Where the run came from and what it lacks (an empty tail for a complete native folder, as before)."""
    if run.source_format == "native" and not run.not_recorded:
        return {}
    return {"source": {"format": run.source_format, "not_recorded": list(run.not_recorded), "notes": list(run.notes),
                       "measured_bytes": run.sizes},
            **{name: NOT_RECORDED for name in run.not_recorded}}


EVIDENCE_CHECKS = {"inputs_unchanged": "the run folder's files are the ones registered"}


@dg.asset(partitions_def=rl_run_partitions, group_name=GROUP, kinds={"json", "parquet"}, owners=OWNERS,
          check_specs=blocking_checks("rl_run_evidence", EVIDENCE_CHECKS))
def rl_run_evidence(context: dg.AssetExecutionContext, experiment: ExperimentResource):
    """The run folder validated and hashed; the eval table, best checkpoint per metric (ties and
    missing values explained), cost, statuses, the hack rate per saved step, matched before/after
    pairs, each sample's signals (for SQL) and the rule-derived verdict."""
    config, store, run_id = experiment.config(), experiment.store(), context.partition_key
    record = registered(store, run_id)
    run = load_run(record["folder"])
    try:
        check_unchanged(record, run)
    except RunReportError as exc:
        yield dg.MaterializeResult(metadata={"error": str(exc)})
        yield check_result("inputs_unchanged", [str(exc)])
        return
    t, signals = run_report_settings(config).thresholds, selected_signals(config)
    cost = cost_table(run)
    evidence = _plain({"run": run_id, "inputs": run.sha256, **_source(run), "eval_table": eval_table(run),
                       "best_checkpoints": best_checkpoints(run), "cost": NOT_RECORDED if cost is None else cost,
                       "hack_rates": hack_rates(run, t, signals), "matched_pairs": matched_pairs(run, t, signals),
                       "verdict": verdict(run, t, signals)})
    digest = store.put_json(rl_file(run_id, "evidence.json"), evidence)
    store.put_parquet(rl_file(run_id, "samples.parquet"), sample_table(run_id, run, t, signals))
    best = pl.DataFrame([{k: b[k] for k in ("label", "step", "value", "deployable")}
                         for b in evidence["best_checkpoints"]])
    yield dg.MaterializeResult(
        metadata={"verdict": evidence["verdict"]["verdict"], "rule": evidence["verdict"]["rule"],
                  "total_tokens": NOT_RECORDED if cost is None else evidence["cost"]["total_tokens"],
                  "total_cost_usd": NOT_RECORDED if cost is None else evidence["cost"]["total_cost_usd"],
                  "best_checkpoints": table_preview(best, rows=20), "sha256": digest},
        data_version=dg.DataVersion(digest))
    yield check_result("inputs_unchanged", [])


@dg.asset(partitions_def=rl_run_partitions, deps=[rl_run_evidence], group_name=GROUP, kinds={"markdown"},
          owners=OWNERS)
def run_report(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    """The report in the seed's shape (verdict and the rule that fired, eval table, best
    checkpoints, cost, checkpoint and adapter status, the hack audit with matched pairs, inputs)
    and its plots, byte-identical on rerun; the Markdown and plots in the metadata."""
    config, store, run_id = experiment.config(), experiment.store(), context.partition_key
    record = registered(store, run_id)
    run = load_run(record["folder"])
    check_unchanged(record, run)
    report = build_report(run, run_report_settings(config).thresholds, selected_signals(config))
    for name, data in sorted(report.plots.items()):
        store.put_bytes(rl_file(run_id, name), data)
    digest = store.put_bytes(rl_file(run_id, "report.md"), report.markdown.encode())
    context.log.info(f"{run_id}: {report.verdict['verdict']} (rule {report.verdict['rule']}); "
                     f"{store.path(rl_file(run_id, 'report.md'))}")
    return dg.MaterializeResult(
        metadata={"verdict": report.verdict["verdict"], "rule": report.verdict["rule"],
                  "path": str(store.path(rl_file(run_id, "report.md"))),
                  "report": report_markdown(report.markdown, report.plots),
                  **{name.removesuffix(".png"): png_markdown(data, name)
                     for name, data in sorted(report.plots.items())}},
        data_version=dg.DataVersion(digest))
