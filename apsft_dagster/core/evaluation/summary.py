"""Stage A per-policy figures and the joint arm's stratification (docs/PROTOCOL.md §13).

Per policy: core-IID accuracy (primary) with a percentile bootstrap interval over tasks, core
hard and held-family accuracy, parse, natural-close and loop rates, family macro, the thought
length distribution and the forward tokens spent.

The joint arm is a hybrid of near-best-diverse and fallback-second rows, so its result is also
shown by stratum (project choice, since eval tasks are not train tasks): each (family, level)
cell's share of train tasks whose joint second row was `fallback_second` and their median score
gap, and the joint arm's core-IID margin over the strongest baseline within the cell; cells are
pooled into "mostly fallback" (share >= 0.5) and "mostly near-best-diverse".
"""

from __future__ import annotations

import polars as pl

from apsft_dagster.core.analysis import family_macro
from apsft_dagster.core.selection.arms import the_arm
from apsft_dagster.core.splits import PRIMARY, SECONDARY
from apsft_dagster.core.stats import paired_bootstrap

JOINT_ARM = the_arm(score="joint_gain")  # the arm stratified below: the one that ranks by joint gain


def policy_figures(table: pl.DataFrame, *, n_resamples: int, seed: int, confidence: float) -> dict:
    iid = table.filter(pl.col("split") == PRIMARY).sort("task_id")
    correct = iid["correct"].cast(pl.Float64).to_numpy()
    acc, lower, upper = paired_bootstrap(correct, [0.0] * len(correct), n_resamples=n_resamples, seed=seed,
                                         confidence=confidence) if len(correct) else (float("nan"),) * 3

    def split_acc(name: str) -> float | None:
        rows = table.filter(pl.col("split") == name)
        return float(rows["correct"].mean()) if rows.height else None

    thoughts = table["thought_tokens"]
    return {f"{PRIMARY}_accuracy": acc, f"{PRIMARY}_lower": lower, f"{PRIMARY}_upper": upper,
            **{f"{name}_accuracy": split_acc(name) for name in SECONDARY},
            "parse_rate": float(table["parsed"].mean()), "close_rate": float(table["closed"].mean()),
            "loop_rate": float(table["loop"].mean()), "family_macro": family_macro(table),
            "thought_tokens_p10": float(thoughts.quantile(0.1, "nearest")),
            "thought_tokens_median": float(thoughts.quantile(0.5, "nearest")),
            "thought_tokens_p90": float(thoughts.quantile(0.9, "nearest")),
            "thought_tokens_mean": float(thoughts.mean()), "forward_tokens": int(table["forward_tokens"].sum()),
            "tasks": table.height}


def joint_strata(results: pl.DataFrame, joint_rows: pl.DataFrame, baseline: str) -> dict:
    """Per cell and per stratum: fallback share, median gap, the joint arm's core-IID margin."""
    second = (joint_rows.sort("task_id", "row").group_by("task_id", maintain_order=True).agg(
        pl.col("family").first(), pl.col("level").first(), pl.col("mode").last().alias("second_mode"),
        pl.col("gap").last().alias("gap")))
    cells = second.group_by("family", "level").agg(
        (pl.col("second_mode") == "fallback_second").mean().alias("fallback_share"),
        pl.col("gap").median().alias("median_gap"), pl.len().alias("train_tasks"))
    iid = results.filter(pl.col("split") == PRIMARY)
    acc = (iid.filter(pl.col("arm").is_in([JOINT_ARM, baseline]))
           .group_by("family", "level", "arm").agg(pl.col("correct").mean()).pivot("arm", index=["family", "level"],
                                                                                    values="correct"))
    per_cell = (cells.join(acc.rename({JOINT_ARM: "joint_accuracy", baseline: "baseline_accuracy"}),
                           on=["family", "level"], how="inner")
                .with_columns((pl.col("joint_accuracy") - pl.col("baseline_accuracy")).alias("margin"),
                              pl.when(pl.col("fallback_share") >= 0.5).then(pl.lit("mostly_fallback"))
                              .otherwise(pl.lit("mostly_near_best_diverse")).alias("stratum"))
                .sort("family", "level"))
    strata = {}
    for name in ("mostly_near_best_diverse", "mostly_fallback"):
        rows = per_cell.filter(pl.col("stratum") == name)
        strata[name] = {"cells": rows.height, "mean_margin": float(rows["margin"].mean()) if rows.height else None,
                        "median_gap": float(rows["median_gap"].median()) if rows.height else None}
    return {"baseline": baseline, "cells": per_cell.to_dicts(), "strata": strata}


# the per-policy figures the analysis shows as a table (the document keeps them all)
SHOWN_FIGURES = (f"{PRIMARY}_accuracy", f"{PRIMARY}_lower", f"{PRIMARY}_upper",
                 *(f"{name}_accuracy" for name in SECONDARY),
                 "parse_rate", "close_rate", "loop_rate", "family_macro", "forward_tokens")


def _rounded(value):
    return round(value, 4) if isinstance(value, float) else value


def policy_table(figures: dict[str, dict]) -> pl.DataFrame:
    """One row per policy: the shown figures, floats to 4 places."""
    return pl.DataFrame([{"policy": p, **{k: _rounded(v) for k, v in f.items() if k in SHOWN_FIGURES}}
                         for p, f in figures.items()])


def conditions_table(decision: dict) -> pl.DataFrame:
    """One row per potential arm: each trigger condition's figures and whether it held."""
    return pl.DataFrame([{"arm": arm, **{k: _rounded(v) for k, v in c.items() if k != "checks"},
                          **{f"ok_{k}": ok for k, ok in c["checks"].items()}}
                         for arm, c in decision["conditions"].items()])


INFORMATIVE = (0.05, 0.95)  # base core-IID accuracy strictly inside: a project addition, never a stop (section 13)


def base_accuracy_informative(base_accuracy: float, low: float = INFORMATIVE[0], high: float = INFORMATIVE[1]) -> bool:
    """Base core-IID accuracy strictly inside (low, high): the comparison can move either way."""
    return low < base_accuracy < high


def base_accuracy_note(base_accuracy: float) -> str:
    """The check's reading in words: inside the range, or why a verdict read here may say little."""
    low, high = INFORMATIVE
    if base_accuracy_informative(base_accuracy):
        return f"base core-IID accuracy {base_accuracy:.4f} is inside ({low:.0%}, {high:.0%}): the comparison can move"
    where = "floor" if base_accuracy <= low else "ceiling"
    return (f"base core-IID accuracy {base_accuracy:.4f} is outside ({low:.0%}, {high:.0%}): at a {where} the "
            "comparison can hardly move, so the verdict stands but may be uninformative")
