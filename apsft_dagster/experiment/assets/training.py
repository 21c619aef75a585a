"""train (policies = arm x seed): LoRA adapters behind the budget gate, with their loss curves.

`adapters` holds Stage A's six; `replication_adapters` runs the same training for the replication
seed's policies Stage B's plan names (its partitions are added when the plan names them, so a run
whose Stage A verdict is final has none)."""

from collections.abc import Callable

import dagster as dg

from apsft_dagster import workers
from apsft_dagster.assets.common import (
    GPU_POOL,
    OWNERS,
    blocking_checks,
    check_result,
    log_and_show,
    png_markdown,
    svg_markdown,
)
from apsft_dagster.core.budget import stage_b_outlook
from apsft_dagster.core.layout import adapter_dir, adapter_report, loss_curve
from apsft_dagster.core.policies import parse_policy
from apsft_dagster.core.policy_checks import adapter_problems, training_matrix
from apsft_dagster.core.stage_b import planned
from apsft_dagster.core.store import Store, completed, json_bytes, sha256_bytes
from apsft_dagster.core.training.gate import budget_gate, verified_manifest
from apsft_dagster.core.training.plot import sparkline_svg
from apsft_dagster.experiment.assets.sft_arms import sft_arms, sft_manifest
from apsft_dagster.experiment.partitions import (
    STAGE_A_POLICIES,
    arm_to_policies,
    policy_partitions,
    replication_partitions,
)
from apsft_dagster.resources import ExperimentResource, TrainingResource

ADAPTER_CHECKS = {
    "exact_optimizer_steps": "each adapter took exactly ceil(rows x epochs / grad_accum) optimizer steps",
    "lora_pairs": "each adapter file holds one LoRA pair per linear projection of the decoder blocks",
    "same_initial_adapter": "every policy of a seed started from the same initial adapter (seeded creation)",
}


@dg.asset(pool=GPU_POOL, partitions_def=policy_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
          deps=[dg.AssetDep(sft_arms, partition_mapping=arm_to_policies), sft_manifest], group_name="training",
          kinds={"pytorch", "peft"}, owners=OWNERS, check_specs=blocking_checks("adapters", ADAPTER_CHECKS))
def adapters(context: dg.AssetExecutionContext, experiment: ExperimentResource, trainer: TrainingResource):
    """One LoRA adapter per Stage A policy. Refuses unless the seal and manifest verify; before the
    first optimizer step the training matrix's device-hours are gated against the budget, and the
    gate says whether Stage B's replication training would fit after it (core/budget.py)."""
    yield from train_adapters(context, experiment, trainer)


@dg.asset(pool=GPU_POOL, partitions_def=replication_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
          deps=["stage_b_plan", sft_manifest], group_name="training", kinds={"pytorch", "peft"}, owners=OWNERS,
          check_specs=blocking_checks("replication_adapters", ADAPTER_CHECKS))
def replication_adapters(context: dg.AssetExecutionContext, experiment: ExperimentResource,
                         trainer: TrainingResource):
    """One LoRA adapter per replication policy Stage B's plan names: the arm's SFT file (pinned by
    the manifest) at the replication seed, behind the same gate and checks as `adapters`."""
    planned(experiment.store(), context.partition_keys, "replication_policies")
    yield from train_adapters(context, experiment, trainer)


def train_adapters(context: dg.AssetExecutionContext, experiment: ExperimentResource, trainer: TrainingResource):
    """Train (or keep) each of the run's policies, then the three adapter checks over them."""
    config, store = experiment.config(), experiment.store()
    manifest, manifest_sha, _ = verified_manifest(store, config)
    todo = [p for p in context.partition_keys if not completed(store, adapter_report(p), adapter_dir(p))]
    # a warm helper loads on the idle core during the warm-up; it trains nothing before the gate passed
    share = workers.share(context.asset_key.to_user_string(), training_worker, experiment, trainer).expect(todo)
    gate = None
    if todo:
        try:
            gate = _gate(context, experiment, trainer, manifest, parse_policy(todo[0])[0])
        except Exception:  # refused (the budget): the warm workers stop now, not when collected
            share.close()
            raise
        share.open()
    reports = {}
    for i, policy in enumerate(context.partition_keys):
        if policy in todo:
            got = share.result(policy) or {"report": trainer.train(policy, manifest_sha, log_and_show(context))}
            report = got["report"]
            timing, action = report.pop("timing"), "trained"
        else:
            report, timing, action = store.get_json(adapter_report(policy)), None, "kept"
        reports[policy] = report
        context.add_asset_metadata({**_metadata(store, report, timing, action, gate), **share.placed(policy)},
                                   partition_key=policy)
        context.log.info(f"[{i + 1}/{len(context.partition_keys)}] {policy}: {action}, "
                         f"{report['optimizer_steps']} steps, final loss {report['curve'][-1]['loss']:.4f}")
    problems = adapter_problems(store, reports, config.training)
    digest = sha256_bytes(json_bytes({p: r["adapter_files_sha256"] for p, r in reports.items()}))
    run_meta = {"policies": len(reports), "trained": len(todo)}
    if gate:
        run_meta.update(estimated_device_hours=round(gate["device_hours"], 6),
                        budget_device_hours=gate["budget_device_hours"], budget_source=gate["budget_source"],
                        warmup_tokens_per_s=round(gate["tokens_per_s"], 1))
    if gate and gate["stage_b"]:
        run_meta.update(stage_b_within_budget=gate["stage_b"]["within_budget"],
                        estimated_device_hours_with_stage_b=round(gate["stage_b"]["device_hours"], 6),
                        stage_b_budget=gate["stage_b"]["message"])
    yield dg.MaterializeResult(metadata=run_meta, data_version=dg.DataVersion(digest))
    for name in ADAPTER_CHECKS:
        yield check_result(name, problems[name])


def _gate(context: dg.AssetExecutionContext, experiment: ExperimentResource, trainer: TrainingResource,
          manifest: dict, arm: str) -> dict:
    """The budget gate on a warm-up of `arm` (BudgetError when over budget); at Stage A's gate its
    record holds Stage B's outlook too (core/budget.py), said before the first optimizer step."""
    config, store = experiment.config(), experiment.store()
    measured = trainer.warmup(arm)
    matrix = training_matrix(STAGE_A_POLICIES, context.partition_keys)
    gate = budget_gate(store, config, manifest, matrix, measured or config.training.throughput_tokens_per_s.low,
                       measured is not None)
    context.log.info(f"budget gate: {gate['device_hours']:.4f} device-hours estimated for {len(matrix)} policies "
                     f"at {gate['tokens_per_s']:,.0f} tokens/s ({gate['throughput_source']}); budget "
                     f"{gate['budget_device_hours']} ({gate['budget_source']})")
    gate["stage_b"] = stage_b_outlook(manifest, config, matrix, gate)
    if gate["stage_b"]:
        say = context.log.info if gate["stage_b"]["within_budget"] else context.log.warning
        say(f"budget gate: {gate['stage_b']['message']}")
    return gate


def training_worker(experiment: ExperimentResource) -> Callable[[str], dict]:
    """The second core's share of training (workers/local.py): one policy's adapter, behind the
    gate the step already passed; its step lines go to stderr."""
    from apsft_dagster.workers.local import say

    config, store = experiment.config(), experiment.store()
    _, manifest_sha, _ = verified_manifest(store, config)
    trainer = TrainingResource(experiment=experiment)
    return lambda policy: {"report": trainer.train(policy, manifest_sha, say("training"))}


def _metadata(store: Store, report: dict, timing: dict | None, action: str, gate: dict | None) -> dict:
    curve = report["curve"]
    meta = {"action": action, "optimizer_steps": report["optimizer_steps"], "rows": report["rows"],
            "forward_tokens": report["forward_tokens"], "lora_pairs": report["lora_pairs"],
            "first_loss": round(curve[0]["loss"], 4), "final_loss": round(curve[-1]["loss"], 4),
            "initial_adapter_sha256": report["initial_adapter_sha256"],
            "adapter_files_sha256": report["adapter_files_sha256"], "base_weights": report["base_weights"],
            "loss_curve": svg_markdown(sparkline_svg([p["loss"] for p in curve]), report["policy"],
                                       f"window loss {curve[0]['loss']:.3f} to {curve[-1]['loss']:.3f} over "
                                       f"{len(curve)} steps (per segment: loss_curve_plot)"),
            "loss_curve_plot": png_markdown(store.get_bytes(loss_curve(report["policy"])), report["policy"])}
    if timing:
        meta.update(wall_seconds=round(timing["seconds"], 2), tokens_per_s=round(timing["tokens_per_s"], 1),
                    resumed_from_step=timing["resumed_from_step"])
    if gate and gate.get("amendment_seq") is not None:
        meta["budget_amendment"] = gate["budget_source"]
    return meta
