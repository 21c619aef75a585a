"""analyze Stage A: per-policy figures, every trigger condition, the verdict, and Stage B's plan."""

import dagster as dg
import polars as pl

from apsft_dagster.assets.common import OWNERS, table_preview
from apsft_dagster.assets.evaluation import stage_a_eval
from apsft_dagster.core.analysis import stage_a_decision
from apsft_dagster.core.evaluation.summary import joint_strata, policy_figures
from apsft_dagster.core.layout import STAGE_A_DECISION, STAGE_B_PLAN, arm_rows, eval_table
from apsft_dagster.core.stage_b import plan
from apsft_dagster.core.training.policies import BASE
from apsft_dagster.partitions import stage_a_eval_partitions
from apsft_dagster.resources import ExperimentResource

ANALYSIS_CHECKS = {
    "base_accuracy_informative": "base core-IID accuracy lies strictly between 5% and 95% (the comparison can move)",
}


def stage_a_results(store) -> pl.DataFrame:
    return pl.concat([store.get_parquet(eval_table(p)) for p in stage_a_eval_partitions.get_partition_keys()])


@dg.asset(deps=[stage_a_eval], group_name="evaluation", kinds={"polars", "json"}, owners=OWNERS,
          check_specs=[dg.AssetCheckSpec(n, asset="stage_a_analysis", description=d) for n, d in ANALYSIS_CHECKS.items()])
def stage_a_analysis(context: dg.AssetExecutionContext, experiment: ExperimentResource):
    """Stage A by the registered rules: the strongest baseline, each potential arm's conditions one
    by one, the verdict (STAGE_B or CORE_BANKING_NEGATIVE) and SHORTEST_BANKING_LEADS beside it."""
    config, store = experiment.config(), experiment.store()
    results = stage_a_results(store)
    ev = config.evaluation
    decision = stage_a_decision(results, n_resamples=ev.bootstrap_resamples, seed=config.seeds.experiment,
                                thresholds=config.stage_b, confidence=ev.confidence)
    figures = {p: policy_figures(results.filter(pl.col("policy") == p), n_resamples=ev.bootstrap_resamples,
                                 seed=config.seeds.experiment, confidence=ev.confidence)
               for p in stage_a_eval_partitions.get_partition_keys()}
    strata = joint_strata(results, store.get_parquet(arm_rows("joint_potential")), decision["strongest_baseline"])
    document = {"format": "apsft-stage-a/1", "verdict": decision["verdict"], "decision": decision,
                "policies": figures, "joint_strata": strata}
    digest = store.put_json(STAGE_A_DECISION, document)
    table = pl.DataFrame([{"policy": p, **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in f.items()
                                            if k in ("core_iid_accuracy", "core_iid_lower", "core_iid_upper",
                                                     "core_hard_accuracy", "held_family_accuracy", "parse_rate",
                                                     "close_rate", "loop_rate", "family_macro", "forward_tokens")}}
                          for p, f in figures.items()])
    conditions = pl.DataFrame([{"arm": arm, **{k: round(v, 4) if isinstance(v, float) else v
                                               for k, v in c.items() if k not in ("checks",)},
                                **{f"ok_{k}": ok for k, ok in c["checks"].items()}}
                               for arm, c in decision["conditions"].items()])
    base = figures[BASE]["core_iid_accuracy"]
    context.log.info(f"Stage A verdict: {decision['verdict']} (strongest baseline {decision['strongest_baseline']}; "
                     f"triggered {decision['triggered'] or 'none'}; shortest leads: {decision['shortest_leads']})")
    yield dg.MaterializeResult(
        metadata={"verdict": decision["verdict"], "strongest_baseline": decision["strongest_baseline"],
                  "triggered": ", ".join(decision["triggered"]) or "none",
                  "shortest_banking_leads": decision["shortest_leads"], "base_core_iid_accuracy": base,
                  "policies": table_preview(table, rows=len(figures)), "conditions": table_preview(conditions),
                  "sha256": digest},
        data_version=dg.DataVersion(digest))
    yield dg.AssetCheckResult(check_name="base_accuracy_informative", passed=0.05 < base < 0.95,
                              severity=dg.AssetCheckSeverity.ERROR,
                              metadata={"base_core_iid_accuracy": base})


@dg.asset(deps=[stage_a_analysis], group_name="stage_b", kinds={"json"}, owners=OWNERS)
def stage_b_plan(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    """What Stage B runs: the winner, its strongest baseline, the seed-43 policies (trained, merged
    and probed next, by the replication stages), every policy evaluated on the Stage B splits and
    those sampled k times; or, when Stage A does not trigger, nothing, with each potential arm's
    failed conditions."""
    config, store = experiment.config(), experiment.store()
    stage_b = plan(store.get_json(STAGE_A_DECISION)["decision"], config.seeds.replication, config.seeds.experiment)
    digest = store.put_json(STAGE_B_PLAN, stage_b)
    return dg.MaterializeResult(
        metadata={"triggered": stage_b["triggered"], "winner": stage_b["winner"] or "none",
                  "replication_policies": ", ".join(stage_b["replication_policies"]) or "none",
                  "reasons": dg.MetadataValue.json(stage_b["reasons"]), "sha256": digest},
        data_version=dg.DataVersion(digest))
