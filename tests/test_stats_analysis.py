"""The paired task bootstrap against scipy, and every Stage A outcome from constructed tables."""

import itertools
import random

import numpy as np
import polars as pl
import pytest

from apsft_dagster.core.analysis import stage_a_decision
from apsft_dagster.core.config import StageB
from apsft_dagster.core.selection.arms import ARMS
from apsft_dagster.core.stats import paired_bootstrap

RULES = StageB(min_gain=0.03, min_lower_bound=0.0, max_parse_rate_loss=0.02, max_family_macro_loss=0.02, k_samples=2)


def test_paired_bootstrap_agrees_with_scipy_percentile_paired():
    from scipy import stats

    rng = np.random.default_rng(5)
    a = (rng.random(80) < 0.6).astype(float)
    b = (rng.random(80) < 0.45).astype(float)
    mean, lower, upper = paired_bootstrap(a, b, n_resamples=20_000, seed=1)
    ref = stats.bootstrap((a, b), lambda x, y, axis: np.mean(x - y, axis=axis), paired=True, vectorized=True,
                          n_resamples=20_000, confidence_level=0.95, method="percentile", random_state=2)
    assert mean == pytest.approx((a - b).mean())
    # Monte-Carlo tolerance; the resampled means of 0/1 data sit on a grid of 1/80 = 0.0125
    assert lower == pytest.approx(ref.confidence_interval.low, abs=0.025)
    assert upper == pytest.approx(ref.confidence_interval.high, abs=0.025)
    assert lower < mean < upper
    x, y = rng.normal(1.0, 1.0, 200), rng.normal(0.7, 1.0, 200)  # continuous data: no grid
    _, lower, upper = paired_bootstrap(x, y, n_resamples=20_000, seed=4)
    ref = stats.bootstrap((x, y), lambda u, v, axis: np.mean(u - v, axis=axis), paired=True, vectorized=True,
                          n_resamples=20_000, confidence_level=0.95, method="percentile", random_state=5)
    assert lower == pytest.approx(ref.confidence_interval.low, abs=0.01)
    assert upper == pytest.approx(ref.confidence_interval.high, abs=0.01)


def test_paired_bootstrap_resamples_tasks_not_arms_separately():
    """Perfectly correlated arms (b = a - 0.1 on every task): every resample's difference is 0.1."""
    a = np.linspace(0, 1, 50)
    assert paired_bootstrap(a, a - 0.1, n_resamples=500) == pytest.approx((0.1, 0.1, 0.1))
    assert paired_bootstrap([1, 0, 1], [1, 0, 1]) == (0.0, 0.0, 0.0)
    assert paired_bootstrap(a, a[::-1], seed=3) == paired_bootstrap(a, a[::-1], seed=3)
    with pytest.raises(ValueError, match="equal-length"):
        paired_bootstrap([1, 0], [1])


def _table(iid: dict[str, int | range], n: int = 100, parsed: dict[str, int] | None = None,
           held: dict[str, int] | None = None) -> pl.DataFrame:
    """Per arm: the first iid[arm] of n core-IID tasks correct (nested: a better arm is right
    wherever a worse one is); 20 held-family tasks, held[arm] of them correct; parsed[arm] of
    all tasks unparsed (taken from the end)."""
    rows = []
    families = ("caravan", "foundry_ledger", "runeward")
    for arm in ("base", *ARMS):
        k = iid.get(arm, 40)
        right = k if isinstance(k, range) else range(k)
        tasks = [("core_iid", families[i % 3], f"iid-{i:03d}", i in right) for i in range(n)]
        h = (held or {}).get(arm, 10)
        tasks += [("held_family", ("brinework", "spindle")[i % 2], f"held-{i:03d}", i < h) for i in range(20)]
        unparsed = (parsed or {}).get(arm, 0)
        for j, (split, family, task, correct) in enumerate(tasks):
            ok = j < len(tasks) - unparsed
            rows.append({"arm": arm, "task_id": task, "split": split, "family": family,
                         "correct": correct and ok, "parsed": ok})
    return pl.DataFrame(rows)


BASE = {"answer_potential": 60, "joint_potential": 50, "random_natural": 50, "success_rft": 45,
        "shortest_natural": 40, "potential_shuffle": 48}


def test_a_clear_gain_over_every_condition_triggers_stage_b():
    d = stage_a_decision(_table(BASE), n_resamples=2000, thresholds=RULES)
    assert d["strongest_baseline"] == "random_natural" and d["accuracy"]["answer_potential"] == 0.6
    c = d["conditions"]["answer_potential"]
    assert c["margin"] == pytest.approx(0.10) and c["lower"] > 0 and c["triggered"] and all(c["checks"].values())
    assert not d["conditions"]["joint_potential"]["triggered"]  # margin 0
    assert d["triggered"] == ["answer_potential"] and d["verdict"] == "STAGE_B" and not d["shortest_leads"]


@pytest.mark.parametrize("n,change,failed", [
    (400, {"answer_potential": 210}, "margin"),  # +0.025 < 0.03, on 10 wins and no loss: the interval is above 0
    (100, {"potential_shuffle": 60}, "beats_shuffle"),  # shuffle as good: not strictly above
])
def test_each_failed_condition_alone_stops_the_trigger(n, change, failed):
    counts = {a: k * n // 100 for a, k in BASE.items()} | change
    d = stage_a_decision(_table(counts, n=n), n_resamples=2000, thresholds=RULES)
    c = d["conditions"]["answer_potential"]
    assert not c["triggered"] and [k for k, ok in c["checks"].items() if not ok] == [failed]
    assert d["verdict"] == "CORE_BANKING_NEGATIVE"


def test_parse_rate_and_family_macro_losses_stop_the_trigger():
    d = stage_a_decision(_table(BASE, parsed={"answer_potential": 5}), n_resamples=2000, thresholds=RULES)
    c = d["conditions"]["answer_potential"]
    assert c["parse_rate_loss"] == pytest.approx(5 / 120) and not c["checks"]["parse_rate_loss"]
    d = stage_a_decision(_table(BASE, held={"answer_potential": 2}), n_resamples=2000, thresholds=RULES)
    c = d["conditions"]["answer_potential"]
    assert c["checks"]["parse_rate_loss"] and not c["checks"]["family_macro_loss"] and not c["triggered"]
    # family macro: the mean of five family accuracies, each over all its Stage A tasks. Core IID by
    # hand (task i of family i % 3; baseline right on i < 50, treatment on i < 60): caravan 17/34 vs
    # 20/34, foundry_ledger 17/33 vs 20/33, runeward 16/33 vs 20/33; held: 5/10 vs 1/10 for each.
    baseline = (17 / 34 + 17 / 33 + 16 / 33 + 0.5 + 0.5) / 5
    treatment = (20 / 34 + 20 / 33 + 20 / 33 + 0.1 + 0.1) / 5
    assert c["family_macro_loss"] == pytest.approx(baseline - treatment)


def test_the_family_macro_is_the_same_float_whatever_order_the_rows_come_in():
    """(0.05 + 0.1) + 0.15 and (0.1 + 0.15) + 0.05 differ in the last bit: polars groups in no fixed
    order (two laptop runs' Stage A decisions differed there), so the families are summed in name order."""
    from apsft_dagster.core.analysis import family_macro

    hits = {"a": 1, "b": 2, "c": 3}  # of 20 tasks each: accuracies 0.05, 0.1, 0.15
    assert (0.05 + 0.1) + 0.15 != (0.1 + 0.15) + 0.05
    got = set()
    for order in itertools.permutations(hits):
        rows = [{"family": f, "correct": i < hits[f]} for f in order for i in range(20)]
        for shuffle in range(3):
            random.Random(shuffle).shuffle(rows)
            got.add(family_macro(pl.DataFrame(rows)))
    assert got == {((0.05 + 0.1) + 0.15) / 3}


def test_a_noisy_gain_fails_on_the_lower_bound():
    """+0.04 over the baseline (right on 0-49), but won on 31 tasks and lost on 27: the interval crosses 0."""
    d = stage_a_decision(_table({**BASE, "answer_potential": range(27, 81)}), n_resamples=2000, thresholds=RULES)
    c = d["conditions"]["answer_potential"]
    assert c["margin"] == pytest.approx(0.04) and c["lower"] <= 0 < c["upper"]
    assert [k for k, ok in c["checks"].items() if not ok] == ["lower"]


def test_an_unreachable_gate_and_float_rounding():
    near_top = {**BASE, "random_natural": 98, "answer_potential": 100}
    c = stage_a_decision(_table(near_top), n_resamples=500, thresholds=RULES)["conditions"]["answer_potential"]
    assert not c["gate_reachable"] and not c["checks"]["gate_reachable"]
    rounding = {**BASE, "random_natural": 55, "answer_potential": 58}  # 0.58 - 0.55 = 0.0299999...
    c = stage_a_decision(_table(rounding), n_resamples=2000, thresholds=RULES)["conditions"]["answer_potential"]
    assert 0.58 - 0.55 < 0.03 and c["checks"]["margin"]


def test_baseline_ties_go_to_the_first_in_order_and_shortest_leads():
    d = stage_a_decision(_table({**BASE, "success_rft": 50}), n_resamples=200, thresholds=RULES)
    assert d["strongest_baseline"] == "random_natural"
    d = stage_a_decision(_table({a: 40 for a in ARMS} | {"shortest_natural": 70}), n_resamples=200, thresholds=RULES)
    assert d["shortest_leads"] and d["strongest_baseline"] == "shortest_natural"
    assert d["verdict"] == "CORE_BANKING_NEGATIVE"
    d = stage_a_decision(_table({a: 40 for a in ARMS} | {"shortest_natural": 70, "answer_potential": 70}),
                         n_resamples=200, thresholds=RULES)
    assert not d["shortest_leads"]


def test_bad_tables_are_refused_by_name():
    t = _table(BASE)
    with pytest.raises(ValueError, match=r"lack columns \['parsed'\]"):
        stage_a_decision(t.drop("parsed"), thresholds=RULES)
    with pytest.raises(ValueError, match=r"no results for arms \['success_rft'\]"):
        stage_a_decision(t.filter(pl.col("arm") != "success_rft"), thresholds=RULES)
    with pytest.raises(ValueError, match="different task sets"):
        stage_a_decision(t.filter((pl.col("arm") != "base") | (pl.col("task_id") != "iid-000")), thresholds=RULES)


def test_minimum_detectable_effect_by_hand_and_by_simulation():
    """The formula against a hand computation; then its meaning: paired binary tasks whose true
    difference is the MDE are detected (the 95% bootstrap interval's lower end above 0) about 80%
    of the time, and half that effect far less often."""
    from scipy.stats import norm

    from apsft_dagster.core.stats import minimum_detectable_effect

    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 2, 180).astype(float), rng.integers(0, 2, 180).astype(float)
    by_hand = (norm.ppf(0.975) + norm.ppf(0.8)) * np.std(a - b, ddof=1) / np.sqrt(180)
    assert minimum_detectable_effect(a, b) == pytest.approx(by_hand, rel=1e-9)
    assert minimum_detectable_effect(a, b, confidence=0.9, power=0.5) == pytest.approx(
        norm.ppf(0.95) * np.std(a - b, ddof=1) / np.sqrt(180), rel=1e-9)

    def detected(effect: float, trials: int = 300) -> float:
        hits = 0
        for t in range(trials):  # discordant share 0.4: a gains with 0.2 + effect/2, loses with 0.2 - effect/2
            u = np.random.default_rng(100 + t).random(180)
            diff = np.where(u < 0.2 + effect / 2, 1.0, np.where(u < 0.4, -1.0, 0.0))
            hits += paired_bootstrap(diff, np.zeros(180), n_resamples=1000, seed=t)[1] > 0
        return hits / trials

    planned = np.array([1.0] * 36 + [-1.0] * 36 + [0.0] * 108)  # a pilot with that discordant share
    mde = minimum_detectable_effect(planned, np.zeros(180))
    assert mde == pytest.approx(2.8016 * np.sqrt(72 / 179) / np.sqrt(180), rel=1e-4)
    assert 0.7 <= detected(mde) <= 0.92
    assert detected(mde / 2) <= 0.4
    with pytest.raises(ValueError, match=">= 2"):
        minimum_detectable_effect([1.0], [0.0])


def test_the_decision_carries_each_arm_s_detectable_effect():
    results = _table(BASE)
    decision = stage_a_decision(results, n_resamples=200, thresholds=RULES)
    answer, joint = decision["conditions"]["answer_potential"], decision["conditions"]["joint_potential"]
    assert answer["tasks"] == joint["tasks"] == 100 and decision["confidence"] == 0.95
    # answer_potential is right on 10 more of 100 nested tasks than the baseline (random_natural)
    diff = np.array([1.0] * 10 + [0.0] * 90)
    assert answer["minimum_detectable_effect"] == pytest.approx(2.8016 * diff.std(ddof=1) / 10, rel=1e-4)
    assert joint["minimum_detectable_effect"] == 0.0  # the same tasks right as the baseline: no spread
