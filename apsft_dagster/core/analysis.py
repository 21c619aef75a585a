"""The Stage A decision (docs/PROTOCOL.md §13), from one table of per-task results.

`results` holds one row per (policy, task): `arm` (`base` or an arm name), `task_id`, `split`
(`core_iid`, `core_hard`, `held_family`), `family`, `correct`, `parsed`. The strongest trace
baseline is the best core-IID accuracy among random_natural, success_rft, shortest_natural
(ties: first in that order). A potential arm triggers Stage B only when every condition holds;
each is returned on its own, so a report can show which one failed. Comparisons allow for float
rounding (1e-9): an accuracy gap of 0.58 - 0.55 meets a 0.03 threshold.
"""

from __future__ import annotations

import polars as pl

from apsft_dagster.core.config import StageB
from apsft_dagster.core.selection.arms import ARMS, arms_with, the_arm
from apsft_dagster.core.splits import PRIMARY, STAGE_A_SPLITS
from apsft_dagster.core.stats import minimum_detectable_effect, paired_bootstrap
from apsft_dagster.core.verdicts import NEGATIVE, STAGE_B

BASELINES = arms_with(role="baseline")  # random_natural, success_rft, shortest_natural (the tie order)
POTENTIAL = arms_with(role="potential")
SHUFFLE, SHORTEST = the_arm(role="shuffle"), the_arm(rows="shortest")
SPLITS = STAGE_A_SPLITS  # core_iid, core_hard, held_family
COLUMNS = {"arm": pl.String, "task_id": pl.String, "split": pl.String, "family": pl.String, "correct": pl.Boolean,
           "parsed": pl.Boolean}
EPS = 1e-9


def _check(results: pl.DataFrame) -> None:
    missing = [c for c in COLUMNS if c not in results.columns]
    if missing:
        raise ValueError(f"stage_a_decision: results lack columns {missing} (need {list(COLUMNS)})")
    arms = set(results["arm"].unique())
    absent = sorted(set(ARMS) - arms)
    if absent:
        raise ValueError(f"stage_a_decision: no results for arms {absent}")
    bad = sorted(set(results["split"].unique()) - set(SPLITS))
    if bad:
        raise ValueError(f"stage_a_decision: unknown splits {bad} (known {list(SPLITS)})")
    dupes = results.filter(pl.struct("arm", "task_id").is_duplicated())
    if dupes.height:
        raise ValueError(f"stage_a_decision: {dupes.height} duplicated (arm, task_id) rows, e.g. {dupes.row(0)}")
    tasks = results.group_by("arm").agg(pl.col("task_id").sort().alias("t"))
    if tasks["t"].n_unique() != 1:
        raise ValueError("stage_a_decision: arms were evaluated on different task sets")


def accuracy(rows: pl.DataFrame) -> float:
    return float(rows["correct"].mean()) if rows.height else float("nan")


def family_macro(rows: pl.DataFrame) -> float:
    """Mean over families of each family's accuracy on all its Stage A tasks, summed in the families'
    order: polars groups in no fixed order, and a float sum's last bit depends on the order."""
    return float(rows.group_by("family").agg(pl.col("correct").mean()).sort("family")["correct"].mean())


def shortest_leads(acc: dict[str, float]) -> bool:
    """SHORTEST_BANKING_LEADS, the seed's "shortest-natural is the strongest trace arm": every arm is a trace arm
    (base is not one), so its core-IID accuracy is above each of the five others'. Strictly (project choice): at a
    tie for the top no arm is the strongest, and ties never favour shortest_natural, as in the baseline's order."""
    return all(acc[SHORTEST] > acc[a] + EPS for a in ARMS if a != SHORTEST)


def stage_a_decision(results: pl.DataFrame, *, thresholds: StageB, n_resamples: int = 10_000, seed: int = 0,
                     confidence: float = 0.95) -> dict:
    """The strongest baseline, every trigger condition of each potential arm (against the profile's
    `stage_b` thresholds), the verdict."""
    _check(results)
    by_arm = {arm: results.filter(pl.col("arm") == arm) for arm in ARMS}
    iid = {arm: rows.filter(pl.col("split") == PRIMARY).sort("task_id") for arm, rows in by_arm.items()}
    acc = {arm: accuracy(rows) for arm, rows in iid.items()}
    best = max(acc[b] for b in BASELINES)
    baseline = next(b for b in BASELINES if acc[b] >= best - EPS)
    conditions = {}
    for arm in POTENTIAL:
        pair = (iid[arm]["correct"].cast(pl.Float64).to_numpy(), iid[baseline]["correct"].cast(pl.Float64).to_numpy())
        mean, lower, upper = paired_bootstrap(*pair, n_resamples=n_resamples, seed=seed, confidence=confidence)
        c = {"margin": acc[arm] - acc[baseline], "lower": lower, "upper": upper,
             "tasks": len(pair[0]),
             "minimum_detectable_effect": minimum_detectable_effect(*pair, confidence=confidence),
             "beats_shuffle": acc[arm] > acc[SHUFFLE] + EPS,
             "parse_rate_loss": float(by_arm[baseline]["parsed"].mean()) - float(by_arm[arm]["parsed"].mean()),
             "family_macro_loss": family_macro(by_arm[baseline]) - family_macro(by_arm[arm]),
             "gate_reachable": acc[baseline] + thresholds.min_gain <= 1 + EPS}
        c["checks"] = {"margin": c["margin"] >= thresholds.min_gain - EPS,
                       "lower": lower > thresholds.min_lower_bound + EPS,
                       "beats_shuffle": c["beats_shuffle"],
                       "parse_rate_loss": c["parse_rate_loss"] <= thresholds.max_parse_rate_loss + EPS,
                       "family_macro_loss": c["family_macro_loss"] <= thresholds.max_family_macro_loss + EPS,
                       "gate_reachable": c["gate_reachable"]}
        c["triggered"] = all(c["checks"].values())
        conditions[arm] = c
    triggered = [arm for arm in POTENTIAL if conditions[arm]["triggered"]]
    return {"accuracy": acc, "strongest_baseline": baseline, "conditions": conditions, "triggered": triggered,
            "verdict": STAGE_B if triggered else NEGATIVE,
            "shortest_leads": shortest_leads(acc),
            "thresholds": thresholds.model_dump(), "n_resamples": n_resamples, "seed": seed, "confidence": confidence}
