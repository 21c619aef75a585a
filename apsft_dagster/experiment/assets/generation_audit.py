"""The reward-hacking auditor on this platform's own generations (seed 000's signals, issue 14):
degeneration shares of the trace bank (all, and per SFT arm) and of each Stage A policy's completions."""

import io

import dagster as dg
import polars as pl

from apsft_dagster.assets.common import OWNERS, table_preview
from apsft_dagster.experiment.assets.evaluation import stage_a_eval
from apsft_dagster.experiment.assets.sft_arms import sft_arms
from apsft_dagster.experiment.assets.trace_bank import trace_bank_index
from apsft_dagster.core.layout import GENERATION_AUDIT, TRACE_BANK, arm_rows, eval_table, shard_file
from apsft_dagster.core.run_report.own_generations import degeneration_table
from apsft_dagster.core.run_report.settings import hack_thresholds
from apsft_dagster.core.arms import ARMS
from apsft_dagster.core.tasks.splits import train_task_ids
from apsft_dagster.experiment.partitions import stage_a_eval_partitions
from apsft_dagster.resources import ExperimentResource


@dg.asset(deps=[trace_bank_index, sft_arms, stage_a_eval], group_name="audits", kinds={"polars", "parquet"},
          owners=OWNERS)
def generation_audit(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    """Per group of texts (every trace, each arm's selected traces, each evaluated policy's
    completions): the share with a repeated short phrase, a repeated line, a repeated run of words,
    any of them, and an exact loop. Descriptive: read beside the arms' and policies' results."""
    config, store = experiment.config(), experiment.store()
    ids = [t for t in train_task_ids(config) if store.exists(shard_file(TRACE_BANK, t))]
    traces = pl.concat([pl.read_parquet(io.BytesIO(store.get_bytes(shard_file(TRACE_BANK, t))),
                                        columns=["trace_id", "thought", "loop"]) for t in ids])
    arm_traces = {arm: store.get_parquet(arm_rows(arm))["source_trace_id"].to_list() for arm in ARMS}
    evaluations = {p: store.get_parquet(eval_table(p)).select("text", "loop")
                   for p in stage_a_eval_partitions.get_partition_keys()}
    table = degeneration_table(traces, arm_traces, evaluations, hack_thresholds(config))
    digest = store.put_parquet(GENERATION_AUDIT, table)
    context.log.info(f"generation audit: {table.height} groups, {traces.height} traces")
    return dg.MaterializeResult(metadata={"groups": table.height, "traces": traces.height, "sha256": digest,
                                          "result": table_preview(table.with_columns(pl.selectors.float().round(4)),
                                                                  rows=table.height)},
                                data_version=dg.DataVersion(digest))
