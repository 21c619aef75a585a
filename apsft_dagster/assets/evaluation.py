"""evaluate Stage A (base + six policies): greedy generations (cached by key), then the parsed tables."""

import sys
from collections import Counter

import dagster as dg
import polars as pl
from tqdm import tqdm

from apsft_dagster.assets.base_model import base_model
from apsft_dagster.assets.common import GPU_POOL, OWNERS, check_result
from apsft_dagster.assets.merged_models import merged_models
from apsft_dagster.assets.task_catalog import task_catalog
from apsft_dagster.core.evaluation.generations import eval_tasks, generate_policy
from apsft_dagster.core.evaluation.parse import eval_table
from apsft_dagster.core.layout import (BASE_MODEL_REPORT, TASK_CATALOG, eval_generations, merged_dir, merged_report,
                                       probe_report)
from apsft_dagster.core.layout import eval_table as eval_table_name
from apsft_dagster.core.model_dir import base_model_path, load_tokenizer
from apsft_dagster.core.store import json_bytes, sha256_bytes
from apsft_dagster.core.training.policies import BASE, arm_and_seed
from apsft_dagster.partitions import STAGE_A_POLICIES, stage_a_eval_partitions
from apsft_dagster.resources import ExperimentResource, GenerationResource

merged_to_eval = dg.StaticPartitionMapping({p: p for p in STAGE_A_POLICIES})


def model_of(store, config, policy: str) -> tuple[str, str]:
    """(model directory, fingerprint) of what a partition evaluates. A merged model that failed
    the deployment probe is not evaluated: the error names it."""
    if policy == BASE:
        return str(base_model_path(config, store)), store.get_json(BASE_MODEL_REPORT)["fingerprint"]
    probe = store.get_json(probe_report(policy))
    if store.get_json(merged_report(policy)).get("weights_kept") is False:
        raise RuntimeError(f"{policy}: its merged weights were released after evaluation (merge.keep_weights: false; "
                           f"{store.path(merged_report(policy))}); rematerialize merged_models for it first")
    if not probe["passed"]:
        raise RuntimeError(f"{policy}: its merged model answered exactly like base on every probe prompt "
                           f"({store.path(probe_report(policy))}); it is not evaluated")
    store.verify(merged_dir(policy))
    return str(store.path(merged_dir(policy))), store.get_json(merged_report(policy))["fingerprint"]


def generate_into(store, name: str, sources: list[str], engine, tasks: pl.DataFrame, fingerprint: str, model_dir: str,
                  allowance: int, desc: str, **sampling) -> tuple[str, dict]:
    """Generate `tasks` (rows of the `sources` artifacts whose key still holds are reused), with a
    progress bar in a terminal, and write them to `name`: (digest, figures)."""
    found = [store.get_parquet(n) for n in sources if store.exists(n)]
    previous = pl.concat(found, how="diagonal_relaxed") if found else None
    bar = tqdm(total=tasks.height, desc=desc, disable=not sys.stderr.isatty())

    def progress(done: int, total: int) -> None:
        bar.update(done - bar.n)

    frame, figures = generate_policy(engine, tasks, fingerprint, model_dir, allowance, previous, progress, **sampling)
    bar.close()
    return store.put_parquet(name, frame), figures


@dg.asset(pool=GPU_POOL, partitions_def=stage_a_eval_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
          deps=[task_catalog, base_model, dg.AssetDep(merged_models, partition_mapping=merged_to_eval)],
          group_name="evaluation", kinds={"pytorch", "parquet"}, owners=OWNERS)
def stage_a_generations(context: dg.AssetExecutionContext, experiment: ExperimentResource,
                        generator: GenerationResource) -> dg.MaterializeResult:
    """Greedy natural-thinking completions on core IID, core hard and held family, batched through
    the generation resource; rows whose key (model, tokenizer, template, prompt ids, sampling,
    allowance, engine) is unchanged are reused."""
    config, store = experiment.config(), experiment.store()
    tasks = eval_tasks(store.get_parquet(TASK_CATALOG))
    digests = {}
    for i, policy in enumerate(context.partition_keys):
        model_dir, fingerprint = model_of(store, config, policy)
        name = eval_generations(policy)
        digests[policy], figures = generate_into(store, name, [name], generator.engine(model_dir), tasks, fingerprint,
                                                 model_dir, config.evaluation.allowance, policy)
        context.add_asset_metadata({"sha256": digests[policy], **figures}, partition_key=policy)
        context.log.info(f"[{i + 1}/{len(context.partition_keys)}] {policy}: {figures['generated']} generated, "
                         f"{figures['reused']} reused, {figures['new_tokens']} new tokens")
    generator.release()
    return dg.MaterializeResult(metadata={"policies": len(digests), "tasks": tasks.height},
                                data_version=dg.DataVersion(sha256_bytes(json_bytes(digests))))


EVAL_CHECKS = {"every_task_once": "each evaluated policy's generations cover every Stage A task exactly once"}


def coverage_problems(policy: str, generated: list[str], wanted: list[str], stage: str = "Stage A") -> list[str]:
    dupes = sorted(t for t, n in Counter(generated).items() if n > 1)
    missing, extra = sorted(set(wanted) - set(generated)), sorted(set(generated) - set(wanted))
    return ([f"{policy}: task {t} generated more than once" for t in dupes[:10]]
            + [f"{policy}: task {t} has no generation" for t in missing[:10]]
            + [f"{policy}: task {t} is not a {stage} task" for t in extra[:10]])


def parsed_table(policy: str, generations: pl.DataFrame, tasks: pl.DataFrame, tokenizer, config,
                 stage: str = "Stage A") -> tuple[pl.DataFrame | None, list[str]]:
    """(the policy's evaluation table, or None, and the coverage problems that stopped it)."""
    found = coverage_problems(policy, generations["task_id"].to_list(), tasks["task_id"].to_list(), stage)
    if found:
        return None, found
    arm, seed = arm_and_seed(policy)
    return eval_table(policy, arm, seed, generations, tasks, tokenizer, config.harvest.loop), []


def table_figures(table: pl.DataFrame) -> dict:
    """A parsed table's figures for the metadata: accuracy (all, per split) and the three rates."""
    by_split = table.group_by("split").agg(pl.col("correct").mean()).sort("split")
    return {"accuracy": float(table["correct"].mean()),
            **{f"accuracy_{s}": round(float(a), 4) for s, a in by_split.iter_rows()},
            "parse_rate": float(table["parsed"].mean()), "close_rate": float(table["closed"].mean()),
            "loop_rate": float(table["loop"].mean())}


@dg.asset(partitions_def=stage_a_eval_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
          deps=[stage_a_generations], group_name="evaluation", kinds={"polars", "parquet"}, owners=OWNERS,
          check_specs=[dg.AssetCheckSpec(n, asset="stage_a_eval", description=d, blocking=True)
                       for n, d in EVAL_CHECKS.items()])
def stage_a_eval(context: dg.AssetExecutionContext, experiment: ExperimentResource):
    """Each generation parsed: answer, parsed, correct, naturally closed, exact loop, thought and
    forward tokens. Needs no model: a parser change reruns only this."""
    config, store = experiment.config(), experiment.store()
    tasks = eval_tasks(store.get_parquet(TASK_CATALOG))
    tokenizer = load_tokenizer(config, store)
    digests, problems = {}, []
    for policy in context.partition_keys:
        table, found = parsed_table(policy, store.get_parquet(eval_generations(policy)), tasks, tokenizer, config)
        problems += found
        if table is None:
            continue
        digests[policy] = store.put_parquet(eval_table_name(policy), table)
        context.add_asset_metadata({"sha256": digests[policy], **table_figures(table)}, partition_key=policy)
    yield dg.MaterializeResult(metadata={"policies": len(digests)},
                               data_version=dg.DataVersion(sha256_bytes(json_bytes(digests))))
    yield check_result("every_task_once", problems)
