"""The reward-hacking auditor on this platform's own generations (the RL run report's signals, issue 14):
degeneration shares of the trace bank (all, and per SFT arm) and of each Stage A policy's completions."""

from pathlib import Path

import dagster as dg
import polars as pl

from apsft_dagster.assets.common import OWNERS, table_preview
from apsft_dagster.core.bank import read_shards, stored_tasks
from apsft_dagster.core.layout import (
    GENERATION_AUDIT,
    GENERATION_AUDIT_INPUTS,
    TRACE_BANK,
    arm_rows,
    eval_table,
    shard_file,
)
from apsft_dagster.core.run_report import own_generations, signals
from apsft_dagster.core.run_report.own_generations import degeneration_table
from apsft_dagster.core.run_report.settings import hack_thresholds
from apsft_dagster.core.selection.arms import ARMS
from apsft_dagster.core.store import json_bytes, sha256_bytes
from apsft_dagster.core.task_file.source import train_task_ids
from apsft_dagster.experiment.assets.evaluation import stage_a_eval
from apsft_dagster.experiment.assets.sft_arms import sft_arms
from apsft_dagster.experiment.assets.trace_bank import trace_bank_index
from apsft_dagster.experiment.partitions import stage_a_eval_partitions
from apsft_dagster.resources import ExperimentResource


@dg.asset(deps=[trace_bank_index, sft_arms, stage_a_eval], group_name="audits", kinds={"polars", "parquet"},
          owners=OWNERS)
def generation_audit(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    """Per group of texts (every trace, each arm's selected traces, each evaluated policy's
    completions): the share with a repeated short phrase, a repeated line, a repeated run of words,
    any of them, and an exact loop. Descriptive: read beside the arms' and policies' results."""
    config, store = experiment.config(), experiment.store()
    ids = stored_tasks(store, TRACE_BANK, train_task_ids(config))
    policies = stage_a_eval_partitions.get_partition_keys()
    thresholds = hack_thresholds(config)
    inputs = _inputs(store, ids, policies, thresholds)
    if store.exists(GENERATION_AUDIT) and store.exists(GENERATION_AUDIT_INPUTS) \
            and store.get_json(GENERATION_AUDIT_INPUTS) == inputs:
        table, action = store.get_parquet(GENERATION_AUDIT), "kept"
    else:
        traces = read_shards(store, TRACE_BANK, ids, ["trace_id", "thought", "loop"])
        arm_traces = {arm: store.get_parquet(arm_rows(arm))["source_trace_id"].to_list() for arm in ARMS}
        evaluations = {p: store.get_parquet(eval_table(p)).select("text", "loop") for p in policies}
        table, action = degeneration_table(traces, arm_traces, evaluations, thresholds), "computed"
        store.put_parquet(GENERATION_AUDIT, table)
        store.put_json(GENERATION_AUDIT_INPUTS, inputs)  # written last: the audit counts once this matches
    digest = store.verify(GENERATION_AUDIT)
    traces = int(table.filter(pl.col("group") == "all traces")["texts"].sum())
    context.log.info(f"generation audit: {action}, {table.height} groups, {traces} traces")
    return dg.MaterializeResult(metadata={"action": action, "groups": table.height, "traces": traces, "sha256": digest,
                                          "result": table_preview(table.with_columns(pl.selectors.float().round(4)),
                                                                  rows=table.height)},
                                data_version=dg.DataVersion(digest))


def _inputs(store, trace_ids: list[str], policies: list[str], thresholds) -> dict:
    """What the audit is a function of: every input file's digest (re-hashed), the thresholds and
    the signal code's bytes. An audit whose recorded inputs equal these is kept, not recomputed."""
    code = {m.__name__: sha256_bytes(Path(m.__file__).read_bytes()) for m in (own_generations, signals)}
    return {"trace_shards": sha256_bytes(json_bytes({t: store.verify(shard_file(TRACE_BANK, t)) for t in trace_ids})),
            "arm_rows": {arm: store.verify(arm_rows(arm)) for arm in ARMS},
            "evaluations": {p: store.verify(eval_table(p)) for p in policies},
            "thresholds": thresholds.model_dump(), "code": code}
