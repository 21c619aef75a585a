"""evaluate Stage A (base + six policies): greedy generations (cached by key), then the parsed tables."""

from collections.abc import Callable

import dagster as dg

from apsft_dagster import workers
from apsft_dagster.assets.common import GPU_POOL, OWNERS, blocking_checks, check_result
from apsft_dagster.core.base_model import load_tokenizer
from apsft_dagster.core.evaluation.generations import eval_tasks
from apsft_dagster.core.evaluation.models import generate_into, model_of
from apsft_dagster.core.evaluation.tables import parsed_table, table_figures
from apsft_dagster.core.layout import TASK_CATALOG, eval_generations
from apsft_dagster.core.layout import eval_table as eval_table_name
from apsft_dagster.core.store import json_bytes, sha256_bytes
from apsft_dagster.core.task_file.source import answer_checks
from apsft_dagster.experiment.assets.base_model import base_model
from apsft_dagster.experiment.assets.merged_models import merged_models
from apsft_dagster.experiment.assets.task_catalog import task_catalog
from apsft_dagster.experiment.partitions import merged_to_eval, stage_a_eval_partitions
from apsft_dagster.resources import ExperimentResource, GenerationResource


@dg.asset(pool=GPU_POOL, partitions_def=stage_a_eval_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
          deps=[task_catalog, base_model, dg.AssetDep(merged_models, partition_mapping=merged_to_eval)],
          group_name="evaluation", kinds={"pytorch", "parquet"}, owners=OWNERS)
def stage_a_generations(context: dg.AssetExecutionContext, experiment: ExperimentResource,
                        generator: GenerationResource) -> dg.MaterializeResult:
    """Greedy natural-thinking completions on core IID, core hard and held family, batched through
    the generation resource; rows whose key (model, tokenizer, template, prompt ids, sampling,
    allowance, engine) is unchanged are reused."""
    store = experiment.store()
    tasks, digests = eval_tasks(store.get_parquet(TASK_CATALOG)), {}
    keys = context.partition_keys
    todo = [p for p in keys if not store.exists(eval_generations(p))]  # a kept file: the step reuses its rows
    share = workers.share("stage_a_generations", generations_worker, experiment, generator).expect(todo).open()
    for i, policy in enumerate(keys):
        got = share.result(policy) or _generations(experiment, generator, tasks, policy)
        digests[policy], figures = store.verify(eval_generations(policy)), got["figures"]
        context.add_asset_metadata({"sha256": digests[policy], **figures, **share.placed(policy)}, partition_key=policy)
        context.log.info(f"[{i + 1}/{len(context.partition_keys)}] {policy}: {figures['generated']} generated, "
                         f"{figures['reused']} reused, {figures['new_tokens']} new tokens")
    generator.release()
    return dg.MaterializeResult(metadata={"policies": len(digests), "tasks": tasks.height},
                                data_version=dg.DataVersion(sha256_bytes(json_bytes(digests))))


def _generations(experiment: ExperimentResource, generator: GenerationResource, tasks, policy: str) -> dict:
    config, store = experiment.config(), experiment.store()
    model_dir, fingerprint = model_of(store, config, policy)
    name = eval_generations(policy)
    _, figures = generate_into(store, name, [name], generator.engine(model_dir), tasks, fingerprint, model_dir,
                               config.evaluation.allowance, policy)
    return {"figures": figures}


def generations_worker(experiment: ExperimentResource) -> Callable[[str], dict]:
    """The second core's share of Stage A's generations (workers/local.py): one policy's."""
    tasks = eval_tasks(experiment.store().get_parquet(TASK_CATALOG))
    generator = GenerationResource(experiment=experiment)
    return lambda policy: _generations(experiment, generator, tasks, policy)


EVAL_CHECKS = {"every_task_once": "each evaluated policy's generations cover every Stage A task exactly once"}


@dg.asset(partitions_def=stage_a_eval_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
          deps=[stage_a_generations], group_name="evaluation", kinds={"polars", "parquet"}, owners=OWNERS,
          check_specs=blocking_checks("stage_a_eval", EVAL_CHECKS))
def stage_a_eval(context: dg.AssetExecutionContext, experiment: ExperimentResource):
    """Each generation parsed: answer, parsed, correct, naturally closed, exact loop, thought and
    forward tokens. Needs no model: a parser change reruns only this."""
    config, store = experiment.config(), experiment.store()
    tasks = eval_tasks(store.get_parquet(TASK_CATALOG))
    tokenizer, checks = load_tokenizer(config, store), answer_checks(config)
    digests, problems = {}, []
    for policy in context.partition_keys:
        table, found = parsed_table(policy, store.get_parquet(eval_generations(policy)), tasks, tokenizer,
                                    config.harvest.loop, checks=checks)
        problems += found
        if table is None:
            continue
        digests[policy] = store.put_parquet(eval_table_name(policy), table)
        context.add_asset_metadata({"sha256": digests[policy], **table_figures(table)}, partition_key=policy)
    yield dg.MaterializeResult(metadata={"policies": len(digests)},
                               data_version=dg.DataVersion(sha256_bytes(json_bytes(digests))))
    yield check_result("every_task_once", problems)
