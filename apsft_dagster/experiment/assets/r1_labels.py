"""rollouts (R1): one answer rollout per scored trace, partitioned by task, and its rollup."""

from collections.abc import Callable

import dagster as dg
import polars as pl

from apsft_dagster import workers
from apsft_dagster.assets.common import GPU_POOL, OWNERS, blocking_checks, check_result, fill_shards, shard_work
from apsft_dagster.core.bank import load_shards, write_index
from apsft_dagster.core.bank_key_check import Keyer
from apsft_dagster.core.layout import R1_BANK, SCORE_BANK, TASK_CATALOG, TRACE_BANK, shard_file
from apsft_dagster.core.rollouts import R1_SCHEMA, r1_rollouts
from apsft_dagster.core.score_bank import SCORE_SCHEMA, join_problems
from apsft_dagster.core.task_file.source import answer_checks, train_task_ids
from apsft_dagster.experiment.assets.score_bank import score_bank, score_bank_index
from apsft_dagster.experiment.partitions import train_task_partitions
from apsft_dagster.resources import ExperimentResource, GenerationResource


@dg.asset(pool=GPU_POOL, partitions_def=train_task_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
          deps=[score_bank, score_bank_index], group_name="rollouts", kinds={"pytorch", "parquet"}, owners=OWNERS)
def r1_labels(context: dg.AssetExecutionContext, experiment: ExperimentResource,
              generator: GenerationResource) -> dg.MaterializeResult:
    """Continue x + z + b once per scored trace (rollouts.sampling), parse, label success."""
    store = experiment.store()
    catalog = store.get_parquet(TASK_CATALOG).filter(pl.col("task_id").is_in(context.partition_keys))
    share = workers.share("r1_labels", r1_worker, experiment, generator)
    keyer = Keyer(store, experiment.config(), R1_BANK)
    return fill_shards(context, store, R1_BANK, catalog, _maker(experiment, generator), share, keyer)


def _maker(experiment: ExperimentResource, generator: GenerationResource) -> Callable[[dict, str], tuple]:
    """make(task row, shard file) -> (digest, action, figures): one rollout per scored trace."""
    config, store = experiment.config(), experiment.store()
    checks = answer_checks(config)  # a task file's checkers; None: the builders' exact comparison

    def make(task: dict, name: str) -> tuple[str, str, dict]:
        scored = store.get_parquet(shard_file(SCORE_BANK, task["task_id"])).select("trace_id")
        traces = store.get_parquet(shard_file(TRACE_BANK, task["task_id"])).join(scored, on="trace_id", how="semi")
        shard = r1_rollouts(generator.engine(), task["prompt"], task["answer"], traces, config.rollouts,
                            config.seeds.experiment, None if checks is None else checks[task["task_id"]])
        figures = {"rollouts": shard.height, "successes": int(shard["success"].sum())}
        return store.put_parquet(name, shard), "rolled out", figures
    return make


def r1_worker(experiment: ExperimentResource) -> Callable[[str], dict]:
    """The second core's share of the rollouts (workers/local.py): one task's shard by id."""
    store = experiment.store()
    return shard_work(store, R1_BANK, _maker(experiment, GenerationResource(experiment=experiment)),
                      Keyer(store, experiment.config(), R1_BANK))


R1_CHECKS = {
    "every_scored_rolled_once": "each scored trace has exactly one rollout",
    "no_unscored_rolled": "no rollout belongs to a trace without a score",
    "hash_parity": "every R1 shard's SHA-256 equals its receipt",
}


@dg.asset(deps=[r1_labels], group_name="rollouts", kinds={"polars", "json"}, owners=OWNERS,
          check_specs=blocking_checks("r1_labels_index", R1_CHECKS))
def r1_labels_index(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    config, store = experiment.config(), experiment.store()
    task_ids = train_task_ids(config)
    scores, _, _ = load_shards(store, SCORE_BANK, task_ids, SCORE_SCHEMA)
    labels, digests, parity = load_shards(store, R1_BANK, task_ids, R1_SCHEMA)
    once, extra = join_problems(scores, labels, "rolled out")
    digest = write_index(store, R1_BANK, digests)
    per_task = labels.group_by("task_id").agg(pl.col("success").any())
    return dg.MaterializeResult(
        metadata={"rollouts": labels.height, "successes": int(labels["success"].sum()),
                  "success_rate": float(labels["success"].mean() or 0.0),
                  "tasks_with_a_success": int(per_task["success"].sum()), "index_sha256": digest},
        data_version=dg.DataVersion(digest),
        check_results=[check_result("every_scored_rolled_once", once), check_result("no_unscored_rolled", extra),
                       check_result("hash_parity", parity)],
    )
