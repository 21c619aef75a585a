"""Stage B's work, priced only as a condition: it runs only if Stage A triggers.

Its counts come from Stage B's own plan (`core/stage_b.py`): from the store once Stage A's
analysis wrote it, else the costliest of every plan Stage A could lead to (each potential arm as
the winner, each baseline as its strongest baseline). Three rows: the replication seed's
training (the budget gate then prices Stage A's matrix and these policies together), their
merges and probes, and the Stage B generations: greedy on the splits Stage A did not evaluate
for every Stage A policy and base (Stage A's rows are reused by key), greedy on every Stage B
split for the replication policies, and `stage_b.k_samples` samples per task for the sampled ones.
"""

from __future__ import annotations

from apsft_dagster.core.plan.observed import Observed
from apsft_dagster.core.plan.stages import (
    REGISTERED_COUNTS,
    Stage,
    arm_tokens,
    merge_and_probe,
    policy_shares,
    split_size,
    tokens,
)
from apsft_dagster.core.policies import parse_policy, stage_a_eval_keys
from apsft_dagster.core.selection.rules import ROWS_PER_TASK
from apsft_dagster.core.splits import STAGE_A_SPLITS, STAGE_B_SPLITS
from apsft_dagster.core.stage_b import possible_plans

CONDITION = "Stage B, only if Stage A triggers"  # the plan table's heading over these rows (core/plan/table.py)


def candidate_plans(config, seen: Observed) -> tuple[list[dict], str]:
    """Stage B's plan from the store, or every plan Stage A could lead to."""
    if seen.stage_b is not None:
        return [seen.stage_b], "store (Stage B plan)"
    return possible_plans(config.seeds.replication, config.seeds.experiment), REGISTERED_COUNTS


def _costliest(stages: list[Stage]) -> Stage:
    def cost(stage: Stage) -> tuple:
        return (sum(p.expected or 0 for p in stage.parts), sum(p.upper for p in stage.parts))
    return max(stages, key=cost)


def replication_training(config, plan: dict, seen: Observed, counts: str) -> Stage:
    t, policies = config.training, plan["replication_policies"]
    rows, cap = ROWS_PER_TASK * config.tasks.train.total, min(t.max_length, config.harvest.record_limit)
    by_arm, source = arm_tokens(config, seen)
    expected = None if by_arm is None else sum(by_arm[parse_policy(p)[0]] for p in policies)
    arms = " and ".join(parse_policy(p)[0] for p in policies)
    work = (f"{len(policies)} replication policies ({arms}, seed {config.seeds.replication}) x {rows:,} rows x "
            f"{t.epochs} epochs")
    return Stage("stage_b_training", "Stage B: replication training", work, counts,
                 [tokens("training", len(policies) * rows * cap * t.epochs, expected)], source,
                 done=len(seen.adapters & set(policies)) / len(policies), conditional=True,
                 partitions=policy_shares(policies, by_arm), partition="policy", loads="worker")


def generations(config, plan: dict, seen: Observed, counts: str) -> Stage:
    allowance, k = config.evaluation.allowance, config.stage_b.k_samples
    every = sum(split_size(config, s) for s in STAGE_B_SPLITS)
    new_splits = [s for s in STAGE_B_SPLITS if s not in STAGE_A_SPLITS]
    new = sum(split_size(config, s) for s in new_splits)
    reused = set(stage_a_eval_keys(config))  # their Stage A splits' rows are reused by generation key
    tasks = {p: new if p in reused else every for p in plan["greedy_policies"]}  # a policy's partition
    greedy, sampled = sum(tasks.values()), len(plan["sampled_policies"]) * k * every
    for p in plan["sampled_policies"]:
        tasks[p] = tasks.get(p, 0) + k * every
    work = (f"greedy: {len(reused)} policies x {new} {'+'.join(new_splits)} tasks, "
            f"{len(plan['greedy_policies']) - len(reused)} replication x {every}; "
            f"samples: {len(plan['sampled_policies'])} policies x {k} x {every} tasks; <= {allowance:,} each")
    done = len(seen.stage_b_done) / len(plan["greedy_policies"])
    return Stage("stage_b_generations", "Stage B: generations", work, counts,
                 [tokens("generation", (greedy + sampled) * allowance, None)], done=done, conditional=True,
                 partitions=[float(n) for n in tasks.values()], partition="policy", loads="partition")


def not_triggered(plan: dict) -> list[Stage]:
    """Stage A's verdict is final: Stage B has nothing to run."""
    reasons = "; ".join(f"{arm}: {', '.join(r) or 'triggered'}" for arm, r in plan["reasons"].items())
    return [Stage("stage_b", "Stage B", f"not triggered: Stage A's verdict is final ({reasons})",
                  "store (Stage B plan)", [], conditional=True)]


def stage_b(config, seen: Observed) -> list[Stage]:
    plans, counts = candidate_plans(config, seen)
    if not plans[0]["triggered"]:
        return not_triggered(plans[0])
    rows = [_costliest([replication_training(config, p, seen, counts) for p in plans]),
            _costliest([merge_and_probe(config, p["replication_policies"], seen, "stage_b_merge",
                                        "Stage B: merge + deployment probe", conditional=True) for p in plans]),
            _costliest([generations(config, p, seen, counts) for p in plans])]
    rows[1].counts = counts
    if seen.stage_b is None:
        rows[0].notes.append("Stage B's winner and strongest baseline are not known before Stage A: each Stage B "
                             "row is the costliest plan Stage A could lead to (core/stage_b.py plan)")
    return rows
