"""harvest: the task-partitioned trace bank (import + natural-thought harvest) and its rollup."""

from collections.abc import Callable

import dagster as dg
import polars as pl

from apsft_dagster import workers
from apsft_dagster.assets.common import GPU_POOL, OWNERS, blocking_checks, check_result, fill_shards, shard_work
from apsft_dagster.core import trace_rollup
from apsft_dagster.core.bank import InheritedBank, load_shards, write_index
from apsft_dagster.core.bank_key_check import Keyer
from apsft_dagster.core.harvest import TRACE_SCHEMA, HarvestTask, harvest_task
from apsft_dagster.core.layout import TASK_CATALOG, TRACE_BANK, summary_file
from apsft_dagster.core.task_file.source import train_task_ids
from apsft_dagster.experiment.assets.base_model import base_model
from apsft_dagster.experiment.assets.task_catalog import task_catalog
from apsft_dagster.experiment.partitions import train_task_partitions
from apsft_dagster.resources import ExperimentResource, GenerationResource


@dg.asset(pool=GPU_POOL,
    partitions_def=train_task_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
    deps=[task_catalog, base_model], group_name="harvest", kinds={"pytorch", "parquet"}, owners=OWNERS,
)
def trace_bank(context: dg.AssetExecutionContext, experiment: ExperimentResource,
               generator: GenerationResource) -> dg.MaterializeResult:
    """One Parquet shard per train task. Resumable: a verified shard is kept, an inherited one is
    imported byte for byte, only the rest is generated (the model loads once per process; on a CPU
    with a core to spare, a second process harvests from the back: workers/local.py)."""
    store = experiment.store()
    catalog = store.get_parquet(TASK_CATALOG).filter(pl.col("task_id").is_in(context.partition_keys))
    share = workers.share("trace_bank", harvest_worker, experiment, generator)
    keyer = Keyer(store, experiment.config(), TRACE_BANK)
    return fill_shards(context, store, TRACE_BANK, catalog, _maker(experiment, generator), share, keyer)


def _maker(experiment: ExperimentResource, generator: GenerationResource) -> Callable[[dict, str], tuple]:
    """make(task row, shard file) -> (digest, action, figures): import the inherited shard, or harvest."""
    config, store = experiment.config(), experiment.store()
    cfg = config.harvest
    inherited = (InheritedBank(cfg.inherited_index, cfg.inherited_index_sha256, TRACE_SCHEMA) if cfg.inherited_index
                 else None)

    def make(row: dict, name: str) -> tuple[str, str, dict]:
        if inherited is not None and row["task_id"] in inherited:
            return inherited.import_into(store, TRACE_BANK, row["task_id"]), "imported", {}
        engine = generator.engine()
        task = HarvestTask(row["task_id"], row["family"], row["level"], row["prompt"], row["answer"])
        shard = harvest_task(engine, engine.tokenizer, task, cfg, config.seeds.experiment)
        figures = {"traces": shard.height, "eligible": int(shard["eligible"].sum()),
                   "thought_tokens": int(shard["n_thought_tokens"].sum()), "loops": int(shard["loop"].sum())}
        return store.put_parquet(name, shard), "generated", figures
    return make


def harvest_worker(experiment: ExperimentResource) -> Callable[[str], dict]:
    """The second core's share of the harvest (workers/local.py): one task's shard by id."""
    store = experiment.store()
    return shard_work(store, TRACE_BANK, _maker(experiment, GenerationResource(experiment=experiment)),
                      Keyer(store, experiment.config(), TRACE_BANK))


INDEX_CHECKS = {
    "every_task_once": "every configured train task has exactly one shard, and no other task does",
    "cell_counts": "per-cell task counts equal the config",
    "hash_parity": "every shard's SHA-256 equals its receipt",
    "unique_trace_ids": "trace ids are unique across the bank",
    "min_eligible": "every non-excluded task has at least min_eligible eligible traces",
}


@dg.asset(
    deps=[trace_bank], group_name="harvest", kinds={"polars", "json"}, owners=OWNERS,
    check_specs=blocking_checks("trace_bank_index", INDEX_CHECKS),
)
def trace_bank_index(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    """The bank index (task -> shard SHA-256) and summary; blocking checks guard every later stage."""
    config, store = experiment.config(), experiment.store()
    task_ids = train_task_ids(config)
    bank, digests, parity = load_shards(store, TRACE_BANK, task_ids, TRACE_SCHEMA)
    summary = trace_rollup.summarize(bank)
    digest = write_index(store, TRACE_BANK, digests)
    store.put_json(summary_file(TRACE_BANK), summary)
    problems = {
        "every_task_once": trace_rollup.check_tasks_present(bank, task_ids),
        "cell_counts": trace_rollup.check_cells(bank, config),
        "hash_parity": parity,
        "unique_trace_ids": trace_rollup.check_unique_trace_ids(bank),
        "min_eligible": trace_rollup.check_min_eligible(bank, config.harvest.min_eligible),
    }
    context.log.info(f"trace bank: {summary}")
    return dg.MaterializeResult(
        metadata={**{k: v for k, v in summary.items() if k != "excluded_tasks"},
                  "excluded_tasks": ", ".join(summary["excluded_tasks"]) or "none", "index_sha256": digest},
        data_version=dg.DataVersion(digest),
        check_results=[check_result(name, found) for name, found in problems.items()],
    )
