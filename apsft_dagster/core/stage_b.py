"""Stage B and the final verdict (docs/PROTOCOL.md §14), as functions of tables.

Stage B runs only for a triggered potential arm (the winner: the triggered arm with the larger
Stage A margin; ties go to answer_potential). Its ladder, each rung requiring the one before:

- POTENTIAL_BANKING_POSITIVE: on the Stage B greedy evaluation (core IID and `rendering`, the
  core-IID tasks under a second template), the winner beats its strongest baseline by at least
  `min_gain` with a paired lower bound above `min_lower_bound`, and the interface metrics hold
  (parse-rate and family-macro losses within their limits over all Stage B tasks);
- REPLICATED_BANKING_POSITIVE: at training seed 43 the winner's core-IID difference to its
  baseline has the same (positive) sign, and the pooled interval (each task's two seed
  differences averaged, then bootstrapped) excludes zero;
- MISSION_POSITIVE: the winner's greedy answer beats base sample-more at matched compute: per
  task, the majority vote over the first base samples whose summed forward tokens stay within
  the winner's forward tokens on that task (at least one sample), paired lower bound above zero.

When Stage A does not trigger, its verdict (CORE_BANKING_NEGATIVE) is final. When it triggers
but the first rung fails, the final verdict is CORE_BANKING_NEGATIVE too: Stage A's STAGE_B is a
request for more evidence, not a finding, and the fuller evidence did not hold.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import polars as pl

from apsft_dagster.core.analysis import EPS, POTENTIAL, family_macro
from apsft_dagster.core.config import StageB
from apsft_dagster.core.layout import STAGE_B_PLAN, merged_report, stage_b_sample_table, stage_b_table
from apsft_dagster.core.policies import stage_a_policies
from apsft_dagster.core.seeds import derive_seed
from apsft_dagster.core.splits import PRIMARY, STAGE_B_PRIMARY
from apsft_dagster.core.stats import paired_bootstrap
from apsft_dagster.core.verdicts import MISSION, NEGATIVE, POSITIVE, REPLICATED

PRIMARY_SPLITS = STAGE_B_PRIMARY  # core_iid and rendering (core/splits.py)


def winner(decision: dict) -> str | None:
    triggered = [a for a in POTENTIAL if a in decision["triggered"]]
    if not triggered:
        return None
    return max(triggered, key=lambda a: (decision["conditions"][a]["margin"], -POTENTIAL.index(a)))


def _paired(rows: pl.DataFrame, a: str, b: str) -> tuple[np.ndarray, np.ndarray]:
    wide = (rows.filter(pl.col("arm").is_in([a, b])).select("arm", "task_id", pl.col("correct").cast(pl.Float64))
            .pivot("arm", index="task_id", values="correct").sort("task_id"))
    if wide.null_count().sum_horizontal().item():
        raise ValueError(f"{a} and {b} were not evaluated on the same tasks")
    return wide[a].to_numpy(), wide[b].to_numpy()


def comparison(results: pl.DataFrame, arm: str, baseline: str, thresholds: StageB, *, n_resamples: int, seed: int,
               confidence: float) -> dict:
    """The first rung on the Stage B greedy table (arm, task_id, split, family, correct, parsed)."""
    primary = results.filter(pl.col("split").is_in(PRIMARY_SPLITS))
    a, b = _paired(primary, arm, baseline)
    mean, lower, upper = paired_bootstrap(a, b, n_resamples=n_resamples, seed=seed, confidence=confidence)
    mine, theirs = results.filter(pl.col("arm") == arm), results.filter(pl.col("arm") == baseline)
    parse_loss = float(theirs["parsed"].mean()) - float(mine["parsed"].mean())
    macro_loss = family_macro(theirs) - family_macro(mine)
    checks = {"margin": mean >= thresholds.min_gain - EPS, "lower": lower > thresholds.min_lower_bound + EPS,
              "parse_rate_loss": parse_loss <= thresholds.max_parse_rate_loss + EPS,
              "family_macro_loss": macro_loss <= thresholds.max_family_macro_loss + EPS}
    return {"margin": mean, "lower": lower, "upper": upper, "parse_rate_loss": parse_loss,
            "family_macro_loss": macro_loss, "checks": checks, "passed": all(checks.values())}


def replication(seed_a: pl.DataFrame, seed_b: pl.DataFrame, arm: str, baseline: str, *, n_resamples: int, seed: int,
                confidence: float) -> dict:
    """Core-IID difference at the second seed, and the pooled interval of the two seeds' differences."""
    a1, b1 = _paired(seed_a.filter(pl.col("split") == PRIMARY), arm, baseline)
    a2, b2 = _paired(seed_b.filter(pl.col("split") == PRIMARY), arm, baseline)
    second = float((a2 - b2).mean())
    pooled = ((a1 - b1) + (a2 - b2)) / 2
    mean, lower, upper = paired_bootstrap(pooled, np.zeros_like(pooled), n_resamples=n_resamples, seed=seed,
                                          confidence=confidence)
    checks = {"same_sign": second > EPS, "pooled_excludes_zero": lower > EPS}
    return {"second_seed_margin": second, "pooled_mean": mean, "pooled_lower": lower, "pooled_upper": upper,
            "checks": checks, "passed": all(checks.values())}


def matched_vote(samples: Sequence[tuple[str | None, int]], budget: int) -> str | None:
    """Majority vote over the first samples (answer, forward tokens) whose summed forward tokens
    stay within `budget`, at least one. Ties go to the answer that came first; an unparsed sample
    (None) votes for no answer."""
    taken, spent = [], 0
    for answer, tokens in samples:
        if taken and spent + tokens > budget:
            break
        taken.append(answer)
        spent += tokens
    return _majority(taken)


def matched_compute(treatment: pl.DataFrame, base_samples: pl.DataFrame, *, n_resamples: int, seed: int,
                    confidence: float) -> dict:
    """treatment: (task_id, correct, forward_tokens) greedy; base_samples: (task_id, sample, answer,
    forward_tokens, correct). The treatment against base sample-more at its own token budget."""
    votes = []
    for task_id, budget in treatment.select("task_id", "forward_tokens").sort("task_id").iter_rows():
        rows = base_samples.filter(pl.col("task_id") == task_id).sort("sample")
        vote = matched_vote(list(zip(rows["answer"], rows["forward_tokens"])), budget)
        votes.append(vote_correct(vote, rows))
    a = treatment.sort("task_id")["correct"].cast(pl.Float64).to_numpy()
    b = np.array(votes, dtype=np.float64)
    mean, lower, upper = paired_bootstrap(a, b, n_resamples=n_resamples, seed=seed, confidence=confidence)
    return {"margin": mean, "lower": lower, "upper": upper, "base_vote_accuracy": float(b.mean()),
            "passed": lower > EPS}


def final_verdict(stage_a_verdict: str, first: dict | None, second: dict | None, third: dict | None) -> tuple[str, str]:
    """(verdict, the rule that fired)."""
    if first is None:
        return stage_a_verdict, "Stage B not triggered: the Stage A verdict is final"
    if not first["passed"]:
        return NEGATIVE, ("Stage B comparison failed (" + ", ".join(k for k, ok in first["checks"].items() if not ok)
                          + "): the Stage A trigger did not hold on the Stage B evaluation")
    if second is None or not second["passed"]:
        return POSITIVE, "the Stage B comparison holds; the seed-43 replication does not"
    if third is None or not third["passed"]:
        return REPLICATED, "replicated at seed 43 (same sign, pooled interval excludes 0); no matched-compute win"
    return MISSION, "replicated, and the treatment beats base sample-more at matched forward tokens"


def plan(decision: dict, replication_seed: int, experiment_seed: int) -> dict:
    """What Stage B must run, or why it does not run: each potential arm's failed conditions.
    Triggered: the seed-43 policies to train, every policy evaluated greedily on the Stage B splits
    (base, the six Stage A policies, the seed-43 pair) and those sampled k times per task."""
    from apsft_dagster.core.policies import BASE, policy_key
    from apsft_dagster.core.selection.arms import ARM_TABLE, ARMS

    reasons = {arm: [f"{k}: {'%.4f' % c[k] if isinstance(c.get(k), float) else c.get(k)}"
                     for k, ok in c["checks"].items() if not ok]
               for arm, c in decision["conditions"].items()}
    chosen = winner(decision)
    if chosen is None:
        return {"triggered": False, "reasons": reasons, "winner": None, "baseline": None,
                "replication_policies": [], "sampled_arms": [], "greedy_policies": [], "sampled_policies": []}
    baseline = decision["strongest_baseline"]
    replication = [policy_key(chosen, replication_seed), policy_key(baseline, replication_seed)]
    always = [a.name for a in ARM_TABLE if a.sampled_in_stage_b]  # shortest_natural, potential_shuffle
    sampled = list(dict.fromkeys([BASE, chosen, baseline, *always]))
    return {"triggered": True, "reasons": reasons, "winner": chosen, "baseline": baseline,
            "replication_policies": replication, "sampled_arms": sampled,
            "greedy_policies": [BASE, *(policy_key(a, experiment_seed) for a in ARMS), *replication],
            "sampled_policies": [a if a == BASE else policy_key(a, experiment_seed) for a in sampled]}


def possible_plans(replication_seed: int, experiment_seed: int) -> list[dict]:
    """Every plan Stage A could lead to before its decision: each potential arm as the winner, each
    baseline as its strongest baseline (what `apsft plan` and the budget gate price Stage B by)."""
    from apsft_dagster.core.selection.arms import arms_with

    potential = arms_with(role="potential")
    return [plan({"conditions": {a: {"margin": 1.0 if a == chosen else 0.0, "checks": {}} for a in potential},
                  "triggered": [chosen], "strongest_baseline": baseline}, replication_seed, experiment_seed)
            for chosen in potential for baseline in arms_with(role="baseline")]


def sampled_figures(samples: pl.DataFrame) -> dict:
    """Per sampled policy on the primary splits: mean sample accuracy, majority vote over all k
    samples (ties to the answer drawn first; unparsed samples vote for nothing) and pass@k."""
    out = {}
    for policy in samples["policy"].unique(maintain_order=True).to_list():
        rows = samples.filter((pl.col("policy") == policy) & pl.col("split").is_in(PRIMARY_SPLITS))
        votes, passes = [], []
        for _, task in rows.sort("task_id", "sample").group_by("task_id", maintain_order=True):
            vote = _majority(task["answer"].to_list())
            votes.append(vote_correct(vote, task))
            passes.append(bool(task["correct"].any()))
        out[policy] = {"k": int(rows.group_by("task_id").len()["len"].max()), "tasks": len(votes),
                       "sample_accuracy": float(rows["correct"].mean()),
                       "majority_accuracy": float(np.mean(votes)), "pass_at_k": float(np.mean(passes))}
    return out


def vote_correct(vote: str | None, samples: pl.DataFrame) -> bool:
    """A vote is one of the task's sampled answers, judged as that sample was (`correct`: the exact comparison
    with `canonical`, or a task file's checker), so a vote and its samples never disagree."""
    return vote is not None and bool(samples.filter(pl.col("answer") == vote)["correct"].any())


def _majority(taken: list[str | None]) -> str | None:
    """The most frequent answer; ties go to the one drawn first."""
    counts = Counter(taken)
    return max(counts, key=lambda ans: (counts[ans], -taken.index(ans)))


def analyze(stage_b: dict, stage_a_verdict: str, greedy: pl.DataFrame, samples: pl.DataFrame, thresholds: StageB,
            *, experiment_seed: int, replication_seed: int, n_resamples: int, seed: int,
            confidence: float) -> dict:
    """The three rungs from the Stage B tables, and the final verdict with the rule that fired.
    greedy: one row per (policy, task) over the Stage B splits (eval_table's columns); samples:
    one row per (policy, task, sample) (sample_table's columns)."""
    arm, baseline = stage_b["winner"], stage_b["baseline"]
    first_seed = greedy.filter((pl.col("seed") == experiment_seed) | (pl.col("arm") == "base"))
    first = comparison(first_seed, arm, baseline, thresholds, n_resamples=n_resamples, seed=seed,
                       confidence=confidence)
    second_seed = greedy.filter(pl.col("seed") == replication_seed)
    second = replication(first_seed, second_seed, arm, baseline, n_resamples=n_resamples, seed=seed,
                         confidence=confidence)
    primary = pl.col("split").is_in(PRIMARY_SPLITS)
    treatment = first_seed.filter((pl.col("arm") == arm) & primary).select("task_id", "correct", "forward_tokens")
    base_samples = samples.filter((pl.col("arm") == "base") & primary)
    third = matched_compute(treatment, base_samples, n_resamples=n_resamples, seed=seed, confidence=confidence)
    verdict, rule = final_verdict(stage_a_verdict, first, second, third)
    accuracy: dict[str, dict[str, float]] = {}
    for policy, split, acc in (greedy.group_by("policy", "split").agg(pl.col("correct").mean())
                               .sort("policy", "split").iter_rows()):
        accuracy.setdefault(policy, {})[split] = float(acc)
    return {"comparison": first, "replication": second, "matched_compute": third,
            "sampled": sampled_figures(samples), "accuracy": accuracy, "final_verdict": verdict, "rule": rule}


_PLANNED = {"greedy_policies": "the policies Stage B's plan evaluates",
            "replication_policies": "the replication policies of Stage B's plan"}


def planned(store, policies: list[str], field: str = "greedy_policies") -> dict:
    """Stage B's plan; a policy not among its `field` (every policy it evaluates, or the replication
    seed's it trains) is refused by name, e.g. a partition added by hand in the UI."""
    stage_b = store.get_json(STAGE_B_PLAN)
    extra = sorted(set(policies) - set(stage_b[field]))
    if extra:
        raise RuntimeError(f"{', '.join(extra)}: not among {_PLANNED[field]} ({store.path(STAGE_B_PLAN)} names "
                           f"{stage_b[field] or 'none: Stage A did not trigger'})")
    return stage_b


def parsed_tables(store, stage_b: dict) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The triggered plan's parsed tables, concatenated: greedy (every policy it evaluates) and
    samples (every policy it samples); each missing table is named, and none is read, when any is."""
    missing = [n for n in [*map(stage_b_table, stage_b["greedy_policies"]),
                           *map(stage_b_sample_table, stage_b["sampled_policies"])] if not store.exists(n)]
    if missing:
        raise RuntimeError(f"Stage B tables missing: {', '.join(missing)}; materialize stage_b_generations and "
                           "stage_b_eval for the plan's policies first")
    greedy = pl.concat([store.get_parquet(stage_b_table(p)) for p in stage_b["greedy_policies"]])
    samples = pl.concat([store.get_parquet(stage_b_sample_table(p)) for p in stage_b["sampled_policies"]])
    return greedy, samples


def sample_seeds(experiment_seed: int, task_ids: list[str]) -> list[int]:
    """One seed per task, the same for every sampled policy (common random numbers across arms)."""
    return [derive_seed(experiment_seed, "stage_b_samples", t) for t in task_ids]


def released_policies(store, config, stage_b: dict) -> list[str]:
    """With merge.keep_weights false, release every merged model evaluated (Stage A's, and the
    seed-43 pair when Stage B ran); the receipts keep their fingerprints."""
    if config.merge.keep_weights:
        return []
    from apsft_dagster.core.training.deploy import release_weights  # torch, only when weights go

    done = []
    for policy in [*stage_a_policies(config), *stage_b["replication_policies"]]:
        if store.exists(merged_report(policy)) and store.get_json(merged_report(policy)).get("weights_kept", True):
            release_weights(store, policy)
            done.append(policy)
    return done
