"""Stage B: its plan (what it runs, from Stage A's verdict); then, only when Stage A triggers,
greedy generations of every planned policy on the Stage B splits (Stage A's rows reused by key),
k samples per task for the sampled policies, their parsed tables; and the final verdict by the
ladder (core/stage_b.py)."""

from collections.abc import Callable

import dagster as dg
import polars as pl

from apsft_dagster import workers
from apsft_dagster.assets.common import GPU_POOL, OWNERS, blocking_checks, check_result, table_preview
from apsft_dagster.core.base_model import load_tokenizer
from apsft_dagster.core.evaluation.generations import eval_tasks
from apsft_dagster.core.evaluation.models import generate_into, model_of
from apsft_dagster.core.evaluation.parse import sample_table
from apsft_dagster.core.evaluation.tables import parsed_table, sample_problems, table_figures
from apsft_dagster.core.layout import (
    PARITY_GATE,
    STAGE_A_DECISION,
    STAGE_B_DECISION,
    STAGE_B_PLAN,
    TASK_CATALOG,
    eval_generations,
    stage_b_sample_table,
    stage_b_samples,
    stage_b_table,
)
from apsft_dagster.core.layout import stage_b_generations as generations_name
from apsft_dagster.core.parity import scoring_instrument, verdict_scoring
from apsft_dagster.core.policies import arm_and_seed
from apsft_dagster.core.rehearsal import labelled
from apsft_dagster.core.splits import STAGE_B_SPLITS
from apsft_dagster.core.stage_b import (
    analyze,
    final_verdict,
    parsed_tables,
    plan,
    planned,
    released_policies,
    sample_seeds,
)
from apsft_dagster.core.store import json_bytes, sha256_bytes
from apsft_dagster.core.task_file.source import answer_checks
from apsft_dagster.experiment.assets.analysis import stage_a_analysis
from apsft_dagster.experiment.assets.evaluation import stage_a_generations
from apsft_dagster.experiment.assets.merged_models import merged_models, replication_merged_models
from apsft_dagster.experiment.partitions import REPLICATION_POLICIES, STAGE_B_POLICIES, stage_b_partitions
from apsft_dagster.resources import ExperimentResource, GenerationResource


@dg.asset(deps=[stage_a_analysis], group_name="stage_b", kinds={"json"}, owners=OWNERS)
def stage_b_plan(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    """What Stage B runs: the winner, its strongest baseline, the seed-43 policies (trained, merged
    and probed next, by the replication stages), every policy evaluated on the Stage B splits and
    those sampled k times; or, when Stage A does not trigger, nothing, with each potential arm's
    failed conditions."""
    config, store = experiment.config(), experiment.store()
    stage_b = plan(store.get_json(STAGE_A_DECISION)["decision"], config.seeds.replication, config.seeds.experiment)
    digest = store.put_json(STAGE_B_PLAN, stage_b)
    # the partitions Stage B asks for, so the UI lists them (a run whose verdict is final adds none)
    for partitions, field in ((REPLICATION_POLICIES, "replication_policies"), (STAGE_B_POLICIES, "greedy_policies")):
        if stage_b[field]:
            context.instance.add_dynamic_partitions(partitions, stage_b[field])
    return dg.MaterializeResult(
        metadata={"triggered": stage_b["triggered"], "winner": stage_b["winner"] or "none",
                  "replication_policies": ", ".join(stage_b["replication_policies"]) or "none",
                  "reasons": dg.MetadataValue.json(stage_b["reasons"]), "sha256": digest},
        data_version=dg.DataVersion(digest))


@dg.asset(pool=GPU_POOL, partitions_def=stage_b_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
          deps=[stage_b_plan, dg.AssetDep(merged_models, partition_mapping=dg.AllPartitionMapping()),
                dg.AssetDep(replication_merged_models, partition_mapping=dg.IdentityPartitionMapping()),
                dg.AssetDep(stage_a_generations, partition_mapping=dg.AllPartitionMapping())],
          group_name="stage_b", kinds={"pytorch", "parquet"}, owners=OWNERS)
def stage_b_generations(context: dg.AssetExecutionContext, experiment: ExperimentResource,
                        generator: GenerationResource) -> dg.MaterializeResult:
    """Greedy natural-thinking completions on core IID, core hard, held family and `rendering`
    (Stage A's rows reused by key); for the policies the plan samples, k samples per task at the
    harvest's sampling settings, seeded per task.

    Runs only when Stage A triggers: its partitions are the policies `stage_b_plan` names (none
    after a run whose Stage A verdict is final)."""
    store = experiment.store()
    stage_b = planned(store, context.partition_keys)
    work, digests = generations_worker(experiment, generator), {}
    keys = context.partition_keys
    todo = [p for p in keys if not store.exists(generations_name(p))
            or (p in stage_b["sampled_policies"] and not store.exists(stage_b_samples(p)))]  # kept: the step's
    share = workers.share("stage_b_generations", generations_worker, experiment, generator).expect(todo).open()
    for i, policy in enumerate(keys):
        got = share.result(policy) or work(policy)
        for kind, name, figures in got["runs"]:
            digests[name] = store.verify(name)
            context.add_asset_metadata({**{f"{kind}_{k}": v for k, v in {"sha256": digests[name], **figures}.items()},
                                        **share.placed(policy)}, partition_key=policy)
            context.log.info(f"[{i + 1}/{len(context.partition_keys)}] {policy} {kind}: {figures['generated']} "
                             f"generated, {figures['reused']} reused, {figures['new_tokens']} new tokens")
    generator.release()
    tasks = eval_tasks(store.get_parquet(TASK_CATALOG), STAGE_B_SPLITS).height
    return dg.MaterializeResult(metadata={"policies": len(context.partition_keys), "tasks": tasks},
                                data_version=dg.DataVersion(sha256_bytes(json_bytes(digests))))


def generations_worker(experiment: ExperimentResource,
                       generator: GenerationResource | None = None) -> Callable[[str], dict]:
    """One policy's Stage B generations -> {"runs": [(kind, file, figures)]}: greedy (Stage A's rows
    reused by key), and k samples when the plan samples it. Also the second core's share
    (workers/local.py)."""
    config, store = experiment.config(), experiment.store()
    generator = generator or GenerationResource(experiment=experiment)
    stage_b = store.get_json(STAGE_B_PLAN)
    tasks = eval_tasks(store.get_parquet(TASK_CATALOG), STAGE_B_SPLITS)
    seeds = sample_seeds(config.seeds.experiment, tasks["task_id"].to_list())

    def work(policy: str) -> dict:
        model_dir, fingerprint = model_of(store, config, policy)
        engine = generator.engine(model_dir)
        # (file, where its reusable rows are, how it samples): greedy reuses Stage A's rows too
        runs = [(generations_name(policy), [generations_name(policy), eval_generations(policy)], {})]
        if policy in stage_b["sampled_policies"]:
            runs.append((stage_b_samples(policy), [stage_b_samples(policy)],
                         {"sampling": config.harvest.sampling, "n": config.stage_b.k_samples, "seeds": seeds}))
        done = []
        for name, sources, how in runs:
            kind = "samples" if how else "greedy"
            _, figures = generate_into(store, name, sources, engine, tasks, fingerprint, model_dir,
                                       config.evaluation.allowance, f"{policy} {kind}", **how)
            done.append((kind, name, figures))
        return {"runs": done}
    return work


STAGE_B_CHECKS = {
    "every_task_once": "each planned policy's greedy generations cover every Stage B task exactly once",
    "k_samples_per_task": "each sampled policy has exactly stage_b.k_samples samples for every Stage B task",
}


@dg.asset(partitions_def=stage_b_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
          deps=[stage_b_generations], group_name="stage_b", kinds={"polars", "parquet"}, owners=OWNERS,
          check_specs=blocking_checks("stage_b_eval", STAGE_B_CHECKS))
def stage_b_eval(context: dg.AssetExecutionContext, experiment: ExperimentResource):
    """Each Stage B generation and sample parsed like Stage A's (answer, parsed, correct, closed,
    loop, thought and forward tokens). Needs no model: a parser change reruns only this.

    Runs only when Stage A triggers: its partitions are the policies `stage_b_plan` names (none
    after a run whose Stage A verdict is final)."""
    config, store = experiment.config(), experiment.store()
    stage_b = planned(store, context.partition_keys)
    tasks = eval_tasks(store.get_parquet(TASK_CATALOG), STAGE_B_SPLITS)
    wanted = tasks["task_id"].to_list()
    tokenizer, checks = load_tokenizer(config, store), answer_checks(config)
    digests, problems = {}, {name: [] for name in STAGE_B_CHECKS}
    for policy in context.partition_keys:
        table, found = parsed_table(policy, store.get_parquet(generations_name(policy)), tasks, tokenizer,
                                    config.harvest.loop, "Stage B", checks)
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
                parsed = sample_table(policy, arm, seed, samples, tasks, tokenizer, config.harvest.loop, checks)
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
    if analysis.get("rehearsal"):
        document["rehearsal"] = analysis["rehearsal"]
    if stage_b["triggered"]:
        greedy, samples = parsed_tables(store, stage_b)
        ev = config.evaluation
        document |= analyze(stage_b, analysis["verdict"], greedy, samples, config.stage_b,
                            experiment_seed=config.seeds.experiment, replication_seed=config.seeds.replication,
                            n_resamples=ev.bootstrap_resamples, seed=config.seeds.experiment, confidence=ev.confidence)
    else:
        verdict, rule = final_verdict(analysis["verdict"], None, None, None)
        document |= {"final_verdict": verdict, "rule": rule}
    gate = store.get_json(PARITY_GATE)
    if scoring := verdict_scoring(gate, config):  # after a failed gate: which instrument scored the bank, and why
        document["scoring"] = scoring
    digest = store.put_json(STAGE_B_DECISION, document)
    released = released_policies(store, config, stage_b)
    verdict = labelled(document["final_verdict"], document)
    context.log.info(f"final verdict: {verdict} ({document['rule']})")
    rungs = {k: document[k]["passed"] for k in ("comparison", "replication", "matched_compute") if k in document}
    return dg.MaterializeResult(
        metadata={"triggered": stage_b["triggered"], "final_verdict": verdict,
                  "rule": document["rule"], "reasons": dg.MetadataValue.json(stage_b["reasons"]),
                  "scoring_instrument": scoring_instrument(gate, config)[1],
                  **{f"passed_{k}": v for k, v in rungs.items()},
                  **({"accuracy": table_preview(pl.DataFrame([{"policy": p, **{s: round(a, 4) for s, a in acc.items()}}
                                                              for p, acc in document["accuracy"].items()]),
                                                rows=len(document["accuracy"]))} if "accuracy" in document else {}),
                  "weights_released": ", ".join(released) or "none", "sha256": digest},
        data_version=dg.DataVersion(digest))
