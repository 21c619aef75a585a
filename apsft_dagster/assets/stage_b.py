"""Stage B, run only when Stage A triggers: greedy generations of every planned policy on the
Stage B splits (Stage A's rows reused by key), k samples per task for the sampled policies, their
parsed tables, and the final verdict by the ladder (core/stage_b.py)."""

import dagster as dg
import polars as pl

from apsft_dagster.assets.analysis import stage_b_plan
from apsft_dagster.assets.common import GPU_POOL, OWNERS, check_result, table_preview
from apsft_dagster.assets.evaluation import generate_into, model_of, parsed_table, stage_a_generations, table_figures
from apsft_dagster.assets.merged_models import merged_models
from apsft_dagster.core.evaluation.generations import STAGE_B_SPLITS, eval_tasks
from apsft_dagster.core.evaluation.parse import sample_table
from apsft_dagster.core.layout import (STAGE_A_DECISION, STAGE_B_DECISION, STAGE_B_PLAN, TASK_CATALOG,
                                       eval_generations, merged_report, stage_b_generations as generations_name,
                                       stage_b_sample_table, stage_b_samples, stage_b_table)
from apsft_dagster.core.model_dir import load_tokenizer
from apsft_dagster.core.seeds import derive_seed
from apsft_dagster.core.stage_b import analyze, final_verdict
from apsft_dagster.core.store import json_bytes, sha256_bytes
from apsft_dagster.core.training.deploy import release_weights
from apsft_dagster.core.training.policies import BASE, arm_and_seed, stage_a_policies
from apsft_dagster.partitions import stage_a_eval_partitions, stage_b_eval_partitions
from apsft_dagster.resources import ExperimentResource, GenerationResource

POLICY_KEYS = [k for k in stage_b_eval_partitions.get_partition_keys() if k != BASE]
to_stage_b = dg.StaticPartitionMapping({p: p for p in POLICY_KEYS})


def planned(store, policies: list[str]) -> dict:
    """Stage B's plan; a policy it does not name is refused by name."""
    stage_b = store.get_json(STAGE_B_PLAN)
    extra = sorted(set(policies) - set(stage_b["greedy_policies"]))
    if extra:
        raise RuntimeError(f"{', '.join(extra)}: not in Stage B's plan ({store.path(STAGE_B_PLAN)} names "
                           f"{stage_b['greedy_policies'] or 'nothing: Stage A did not trigger'})")
    return stage_b


def sample_seeds(experiment_seed: int, task_ids: list[str]) -> list[int]:
    """One seed per task, the same for every sampled policy (common random numbers across arms)."""
    return [derive_seed(experiment_seed, "stage_b_samples", t) for t in task_ids]


@dg.asset(pool=GPU_POOL, partitions_def=stage_b_eval_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
          deps=[stage_b_plan, dg.AssetDep(merged_models, partition_mapping=to_stage_b),
                dg.AssetDep(stage_a_generations, partition_mapping=dg.StaticPartitionMapping(
                    {p: p for p in stage_a_eval_partitions.get_partition_keys()}))],
          group_name="stage_b", kinds={"pytorch", "parquet"}, owners=OWNERS)
def stage_b_generations(context: dg.AssetExecutionContext, experiment: ExperimentResource,
                        generator: GenerationResource) -> dg.MaterializeResult:
    """Greedy natural-thinking completions on core IID, core hard, held family and `rendering`
    (Stage A's rows reused by key); for the policies the plan samples, k samples per task at the
    harvest's sampling settings, seeded per task."""
    config, store = experiment.config(), experiment.store()
    stage_b = planned(store, context.partition_keys)
    tasks = eval_tasks(store.get_parquet(TASK_CATALOG), STAGE_B_SPLITS)
    seeds = sample_seeds(config.seeds.experiment, tasks["task_id"].to_list())
    digests = {}
    for i, policy in enumerate(context.partition_keys):
        model_dir, fingerprint = model_of(store, config, policy)
        engine = generator.engine(model_dir)
        # (file, where its reusable rows are, how it samples): greedy reuses Stage A's rows too
        runs = [(generations_name(policy), [generations_name(policy), eval_generations(policy)], {})]
        if policy in stage_b["sampled_policies"]:
            runs.append((stage_b_samples(policy), [stage_b_samples(policy)],
                         {"sampling": config.harvest.sampling, "n": config.stage_b.k_samples, "seeds": seeds}))
        for name, sources, how in runs:
            kind = "samples" if how else "greedy"
            digests[name], figures = generate_into(store, name, sources, engine, tasks, fingerprint, model_dir,
                                                   config.evaluation.allowance, f"{policy} {kind}", **how)
            context.add_asset_metadata({f"{kind}_{k}": v for k, v in {"sha256": digests[name], **figures}.items()},
                                       partition_key=policy)
            context.log.info(f"[{i + 1}/{len(context.partition_keys)}] {policy} {kind}: {figures['generated']} "
                             f"generated, {figures['reused']} reused, {figures['new_tokens']} new tokens")
    generator.release()
    return dg.MaterializeResult(metadata={"policies": len(context.partition_keys), "tasks": tasks.height},
                                data_version=dg.DataVersion(sha256_bytes(json_bytes(digests))))


STAGE_B_CHECKS = {
    "every_task_once": "each planned policy's greedy generations cover every Stage B task exactly once",
    "k_samples_per_task": "each sampled policy has exactly stage_b.k_samples samples for every Stage B task",
}


def sample_problems(policy: str, samples: pl.DataFrame, wanted: list[str], k: int) -> list[str]:
    counts = dict(samples.group_by("task_id").len().iter_rows())
    return ([f"{policy}: task {t} has {counts.get(t, 0)} samples, expected {k}"
             for t in wanted if counts.get(t, 0) != k][:10]
            + [f"{policy}: task {t} is not a Stage B task" for t in sorted(set(counts) - set(wanted))[:10]])


@dg.asset(partitions_def=stage_b_eval_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
          deps=[stage_b_generations], group_name="stage_b", kinds={"polars", "parquet"}, owners=OWNERS,
          check_specs=[dg.AssetCheckSpec(n, asset="stage_b_eval", description=d, blocking=True)
                       for n, d in STAGE_B_CHECKS.items()])
def stage_b_eval(context: dg.AssetExecutionContext, experiment: ExperimentResource):
    """Each Stage B generation and sample parsed like Stage A's (answer, parsed, correct, closed,
    loop, thought and forward tokens). Needs no model: a parser change reruns only this."""
    config, store = experiment.config(), experiment.store()
    stage_b = planned(store, context.partition_keys)
    tasks = eval_tasks(store.get_parquet(TASK_CATALOG), STAGE_B_SPLITS)
    wanted = tasks["task_id"].to_list()
    tokenizer = load_tokenizer(config, store)
    digests, problems = {}, {name: [] for name in STAGE_B_CHECKS}
    for policy in context.partition_keys:
        table, found = parsed_table(policy, store.get_parquet(generations_name(policy)), tasks, tokenizer, config,
                                    "Stage B")
        problems["every_task_once"] += found
        if table is not None:
            digests[stage_b_table(policy)] = store.put_parquet(stage_b_table(policy), table)
            context.add_asset_metadata(table_figures(table), partition_key=policy)
        if policy in stage_b["sampled_policies"]:
            samples = store.get_parquet(stage_b_samples(policy))
            found = sample_problems(policy, samples, wanted, config.stage_b.k_samples)
            problems["k_samples_per_task"] += found
            if not found:
                arm, seed = arm_and_seed(policy)
                parsed = sample_table(policy, arm, seed, samples, tasks, tokenizer, config.harvest.loop)
                digests[stage_b_sample_table(policy)] = store.put_parquet(stage_b_sample_table(policy), parsed)
                context.add_asset_metadata({"sample_accuracy": float(parsed["correct"].mean())}, partition_key=policy)
    yield dg.MaterializeResult(metadata={"tables": len(digests)},
                               data_version=dg.DataVersion(sha256_bytes(json_bytes(digests))))
    for name, found in problems.items():
        yield check_result(name, found)


@dg.asset(deps=[stage_b_plan, stage_b_eval], group_name="stage_b", kinds={"json"}, owners=OWNERS)
def stage_b_analysis(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    """The final verdict. Not triggered: the Stage A verdict is final, recorded with each potential
    arm's failed conditions. Triggered: the Stage B comparison (core IID + rendering), the seed-43
    replication with its pooled interval and the matched-compute comparison with base sample-more,
    rung by rung. Then, with `merge.keep_weights: false`, every merged model's weights are released
    (fingerprints kept): this is the last step that reads them."""
    config, store = experiment.config(), experiment.store()
    analysis, stage_b = store.get_json(STAGE_A_DECISION), store.get_json(STAGE_B_PLAN)
    document = {"format": "apsft-stage-b/2", "stage_a_verdict": analysis["verdict"], "plan": stage_b}
    if stage_b["triggered"]:
        missing = [n for n in [*map(stage_b_table, stage_b["greedy_policies"]),
                               *map(stage_b_sample_table, stage_b["sampled_policies"])] if not store.exists(n)]
        if missing:
            raise RuntimeError(f"Stage B tables missing: {', '.join(missing)}; materialize stage_b_generations and "
                               "stage_b_eval for the plan's policies first")
        greedy = pl.concat([store.get_parquet(stage_b_table(p)) for p in stage_b["greedy_policies"]])
        samples = pl.concat([store.get_parquet(stage_b_sample_table(p)) for p in stage_b["sampled_policies"]])
        ev = config.evaluation
        document |= analyze(stage_b, analysis["verdict"], greedy, samples, config.stage_b,
                            experiment_seed=config.seeds.experiment, replication_seed=config.seeds.replication,
                            n_resamples=ev.bootstrap_resamples, seed=config.seeds.experiment, confidence=ev.confidence)
    else:
        verdict, rule = final_verdict(analysis["verdict"], None, None, None)
        document |= {"final_verdict": verdict, "rule": rule}
    digest = store.put_json(STAGE_B_DECISION, document)
    released = released_policies(store, config, stage_b)
    context.log.info(f"final verdict: {document['final_verdict']} ({document['rule']})")
    rungs = {k: document[k]["passed"] for k in ("comparison", "replication", "matched_compute") if k in document}
    return dg.MaterializeResult(
        metadata={"triggered": stage_b["triggered"], "final_verdict": document["final_verdict"],
                  "rule": document["rule"], "reasons": dg.MetadataValue.json(stage_b["reasons"]),
                  **{f"passed_{k}": v for k, v in rungs.items()},
                  **({"accuracy": table_preview(pl.DataFrame([{"policy": p, **{s: round(a, 4) for s, a in acc.items()}}
                                                              for p, acc in document["accuracy"].items()]),
                                                rows=len(document["accuracy"]))} if "accuracy" in document else {}),
                  "weights_released": ", ".join(released) or "none", "sha256": digest},
        data_version=dg.DataVersion(digest))


def released_policies(store, config, stage_b: dict) -> list[str]:
    """With merge.keep_weights false, release every merged model evaluated (Stage A's, and the
    seed-43 pair when Stage B ran); the receipts keep their fingerprints."""
    if config.merge.keep_weights:
        return []
    done = []
    for policy in [*stage_a_policies(config), *stage_b["replication_policies"]]:
        if store.exists(merged_report(policy)) and store.get_json(merged_report(policy)).get("weights_kept", True):
            release_weights(store, policy)
            done.append(policy)
    return done
