"""Stage B and every final verdict, driven from constructed tables."""

import polars as pl
import pytest

from apsft_dagster.core.config import StageB
from apsft_dagster.core.selection.arms import ARMS
from apsft_dagster.core.stage_b import (
    MISSION,
    POSITIVE,
    REPLICATED,
    comparison,
    final_verdict,
    matched_compute,
    matched_vote,
    replication,
    winner,
)

RULES = StageB(min_gain=0.03, min_lower_bound=0.0, max_parse_rate_loss=0.02, max_family_macro_loss=0.02, k_samples=4)


def _greedy(right: dict[str, range], n: int = 100, unparsed: dict[str, int] | None = None) -> pl.DataFrame:
    rows = []
    for arm, good in right.items():
        for split in ("core_iid", "rendering"):
            for i in range(n):
                bad_parse = i >= n - (unparsed or {}).get(arm, 0)
                rows.append({"arm": arm, "task_id": f"{split}-{i:03d}", "split": split,
                             "family": ("caravan", "foundry_ledger", "runeward")[i % 3],
                             "correct": i in good and not bad_parse, "parsed": not bad_parse})
    return pl.DataFrame(rows)


def test_the_winner_is_the_triggered_arm_with_the_larger_margin():
    def decision(triggered, margins):
        return {"triggered": triggered, "conditions": {a: {"margin": m} for a, m in margins.items()}}

    assert winner(decision([], {"answer_potential": 0.1, "joint_potential": 0.2})) is None
    assert winner(decision(["answer_potential", "joint_potential"],
                           {"answer_potential": 0.05, "joint_potential": 0.08})) == "joint_potential"
    assert winner(decision(["answer_potential", "joint_potential"],
                           {"answer_potential": 0.05, "joint_potential": 0.05})) == "answer_potential"


def test_the_stage_b_comparison_and_its_interface_metrics():
    good = comparison(_greedy({"answer_potential": range(60), "random_natural": range(50)}), "answer_potential",
                      "random_natural", RULES, n_resamples=2000, seed=0, confidence=0.95)
    assert good["passed"] and good["margin"] == pytest.approx(0.10) and good["lower"] > 0
    unparsed = comparison(_greedy({"answer_potential": range(60), "random_natural": range(50)},
                                  unparsed={"answer_potential": 5}), "answer_potential", "random_natural", RULES,
                          n_resamples=2000, seed=0, confidence=0.95)
    assert not unparsed["passed"] and not unparsed["checks"]["parse_rate_loss"]
    small = comparison(_greedy({"answer_potential": range(52), "random_natural": range(50)}), "answer_potential",
                       "random_natural", RULES, n_resamples=2000, seed=0, confidence=0.95)
    assert not small["checks"]["margin"]


def test_replication_needs_the_same_sign_and_a_pooled_interval_above_zero():
    a = _greedy({"answer_potential": range(60), "random_natural": range(50)})
    same = replication(a, _greedy({"answer_potential": range(58), "random_natural": range(50)}), "answer_potential",
                       "random_natural", n_resamples=2000, seed=0, confidence=0.95)
    assert same["passed"] and same["second_seed_margin"] == pytest.approx(0.08)
    assert same["pooled_mean"] == pytest.approx(0.09)  # (0.10 + 0.08) / 2: each task's differences averaged
    flipped = replication(a, _greedy({"answer_potential": range(45), "random_natural": range(50)}),
                          "answer_potential", "random_natural", n_resamples=2000, seed=0, confidence=0.95)
    assert not flipped["passed"] and not flipped["checks"]["same_sign"]


def test_matched_vote_takes_the_samples_the_budget_pays_for():
    samples = [("3", 100), ("4", 100), ("4", 100), ("3", 100), ("3", 100)]
    assert matched_vote(samples, 50) == "3"  # at least one sample, even over budget
    assert matched_vote(samples, 200) == "3"  # a tie between "3" and "4": the first answer seen
    assert matched_vote(samples, 300) == "4"
    assert matched_vote(samples, 10_000) == "3"
    assert matched_vote([(None, 10), (None, 10), ("7", 10)], 30) is None


def test_matched_compute_compares_greedy_with_base_sample_more():
    n = 80
    treatment = pl.DataFrame({"task_id": [f"t{i:02d}" for i in range(n)], "correct": [i < 60 for i in range(n)],
                              "forward_tokens": [250] * n})
    rows = []
    for i in range(n):  # base: samples of 100 tokens; at 250 tokens the first two vote, wrong then right -> wrong
        for s, answer in enumerate(("9", "1", "1")):
            canonical = "1" if i < 30 else "2"
            rows.append({"task_id": f"t{i:02d}", "sample": s, "answer": answer, "forward_tokens": 100,
                         "canonical": canonical, "correct": answer == canonical})
    result = matched_compute(treatment, pl.DataFrame(rows), n_resamples=2000, seed=0, confidence=0.95)
    assert result["base_vote_accuracy"] == 0.0 and result["margin"] == pytest.approx(0.75) and result["passed"]
    richer = treatment.with_columns(pl.lit(300).alias("forward_tokens"))  # three samples: "1" wins on t00-t29
    result = matched_compute(richer, pl.DataFrame(rows), n_resamples=2000, seed=0, confidence=0.95)
    assert result["base_vote_accuracy"] == pytest.approx(30 / 80)


@pytest.mark.parametrize("rungs,verdict", [
    ((None, None, None), "CORE_BANKING_NEGATIVE"),
    (({"passed": False, "checks": {"margin": False, "lower": True}}, None, None), "CORE_BANKING_NEGATIVE"),
    (({"passed": True}, {"passed": False}, None), POSITIVE),
    (({"passed": True}, {"passed": True}, {"passed": False}), REPLICATED),
    (({"passed": True}, {"passed": True}, {"passed": True}), MISSION),
])
def test_every_final_verdict_is_reachable(rungs, verdict):
    stage_a = "CORE_BANKING_NEGATIVE" if rungs[0] is None else "STAGE_B"
    got, rule = final_verdict(stage_a, *rungs)
    assert got == verdict and rule
    if rungs[0] is not None and not rungs[0]["passed"]:  # triggered, then the comparison failed: named
        assert "(margin)" in rule


def test_the_plan_names_what_stage_b_runs_or_why_it_does_not():
    from apsft_dagster.core.stage_b import plan

    checks_ok = {"margin": True, "lower": True, "beats_shuffle": True, "parse_rate_loss": True,
                 "family_macro_loss": True, "gate_reachable": True}
    decision = {"triggered": [], "strongest_baseline": "success_rft",
                "conditions": {"answer_potential": {"margin": 0.01, "checks": {**checks_ok, "margin": False}},
                               "joint_potential": {"margin": 0.05, "lower": -0.02,
                                                   "checks": {**checks_ok, "lower": False}}}}
    none = plan(decision, 43, 42)
    assert not none["triggered"] and none["reasons"] == {"answer_potential": ["margin: 0.0100"],
                                                         "joint_potential": ["lower: -0.0200"]}
    decision["triggered"] = ["joint_potential"]
    decision["conditions"]["joint_potential"]["checks"]["lower"] = True
    some = plan(decision, 43, 42)
    assert some["winner"] == "joint_potential" and some["baseline"] == "success_rft"
    assert some["replication_policies"] == ["joint_potential-seed43", "success_rft-seed43"]
    assert some["sampled_arms"] == ["base", "joint_potential", "success_rft", "shortest_natural", "potential_shuffle"]
    assert some["sampled_policies"] == ["base", "joint_potential-seed42", "success_rft-seed42",
                                        "shortest_natural-seed42", "potential_shuffle-seed42"]
    assert some["greedy_policies"] == ["base", *(f"{a}-seed42" for a in ARMS), "joint_potential-seed43",
                                       "success_rft-seed43"]
    decision["strongest_baseline"] = "shortest_natural"  # the baseline is sampled once, not twice
    assert plan(decision, 43, 42)["sampled_arms"] == ["base", "joint_potential", "shortest_natural",
                                                      "potential_shuffle"]


def _tables(right: dict[str, set[int]], base_samples: list[list[str]], n: int = 60, tokens: int = 100):
    """Greedy rows for every (policy, task) of two primary splits and base's k samples; policy
    names carry the seed (`<arm>-seed<N>`, base unseeded); a task i is right when i is in the set."""
    rows, samples = [], []
    for policy, good in right.items():
        arm, _, seed = policy.partition("-seed")
        for split in ("core_iid", "rendering"):
            for i in range(n):
                rows.append({"policy": policy, "arm": arm, "seed": int(seed) if seed else None,
                             "task_id": f"{split}-{i:03d}", "split": split, "family": ("caravan", "runeward")[i % 2],
                             "correct": i in good, "parsed": True, "forward_tokens": tokens})
                if policy == "base":
                    for j, answer in enumerate(base_samples[i]):
                        samples.append({"policy": "base", "arm": "base", "seed": None, "task_id": f"{split}-{i:03d}",
                                        "split": split, "sample": j, "canonical": "1", "answer": answer,
                                        "forward_tokens": tokens // 2, "correct": answer == "1"})
    return pl.DataFrame(rows, infer_schema_length=None), pl.DataFrame(samples, infer_schema_length=None)


PLAN = {"winner": "answer_potential", "baseline": "random_natural"}


@pytest.mark.parametrize("seed43_right,votes,verdict", [
    (set(range(50)), [["2", "2"]] * 60, MISSION),  # base's two samples (50 tokens each) both wrong
    (set(range(50)), [["1", "1"]] * 60, REPLICATED),  # base sample-more right everywhere: no win
    (set(range(10)), [["2", "2"]] * 60, POSITIVE),  # seed 43 worse than its baseline: no replication
])
def test_analyze_climbs_the_ladder_from_the_tables(seed43_right, votes, verdict):
    from apsft_dagster.core.stage_b import analyze

    greedy, samples = _tables({"base": set(range(20)), "answer_potential-seed42": set(range(50)),
                               "random_natural-seed42": set(range(30)), "answer_potential-seed43": seed43_right,
                               "random_natural-seed43": set(range(30))}, votes)
    result = analyze(PLAN, "STAGE_B", greedy, samples, RULES, experiment_seed=42, replication_seed=43,
                     n_resamples=2000, seed=0, confidence=0.95)
    assert result["final_verdict"] == verdict, result["rule"]
    assert result["comparison"]["margin"] == pytest.approx(20 / 60)
    assert result["replication"]["second_seed_margin"] == pytest.approx((len(seed43_right) - 30) / 60)
    # brute force: base's vote is the first sample's answer when both fit (100 tokens for two of 50)
    expected_vote = sum(v[0] == "1" for v in votes) / 60
    assert result["matched_compute"]["base_vote_accuracy"] == pytest.approx(expected_vote)
    assert result["accuracy"]["random_natural-seed43"] == {"core_iid": 0.5, "rendering": 0.5}


def test_analyze_fails_the_first_rung_when_the_winner_does_not_hold():
    from apsft_dagster.core.stage_b import analyze

    greedy, samples = _tables({"base": set(range(20)), "answer_potential-seed42": set(range(31)),
                               "random_natural-seed42": set(range(30)), "answer_potential-seed43": set(range(50)),
                               "random_natural-seed43": set(range(30))}, [["2", "2"]] * 60)
    result = analyze(PLAN, "STAGE_B", greedy, samples, RULES, experiment_seed=42, replication_seed=43,
                     n_resamples=2000, seed=0, confidence=0.95)
    assert result["final_verdict"] == "CORE_BANKING_NEGATIVE" and "margin" in result["rule"]


def test_sampled_figures_by_brute_force():
    from apsft_dagster.core.stage_b import sampled_figures

    answers = [["1", "2", "2"], ["1", "1", None], ["3", "2", "1"], [None, None, None]]  # canonical "1"
    rows = [{"policy": "base", "task_id": f"t{i}", "split": "core_iid", "sample": j, "answer": a, "canonical": "1",
             "correct": a == "1"} for i, task in enumerate(answers) for j, a in enumerate(task)]
    figures = sampled_figures(pl.DataFrame(rows))["base"]
    # majority: t0 "2", t1 "1", t2 tie of three -> "3" (drawn first), t3 nothing
    assert figures == {"k": 3, "tasks": 4, "sample_accuracy": pytest.approx(4 / 12), "majority_accuracy": 0.25,
                       "pass_at_k": 0.75}


def test_parsed_tables_name_every_missing_table_then_read_them_all(tmp_path):
    from apsft_dagster.core.layout import stage_b_sample_table, stage_b_table
    from apsft_dagster.core.stage_b import parsed_tables
    from apsft_dagster.core.store import Store

    store = Store(tmp_path)
    plan = {"greedy_policies": ["base", "answer_potential"], "sampled_policies": ["base"]}
    store.put_parquet(stage_b_table("base"), pl.DataFrame({"policy": ["base"], "task_id": ["t0"]}))
    with pytest.raises(RuntimeError) as missing:
        parsed_tables(store, plan)
    assert str(missing.value) == (f"Stage B tables missing: {stage_b_table('answer_potential')}, "
                                  f"{stage_b_sample_table('base')}; materialize stage_b_generations and "
                                  "stage_b_eval for the plan's policies first")
    store.put_parquet(stage_b_table("answer_potential"),
                      pl.DataFrame({"policy": ["answer_potential"], "task_id": ["t0"]}))
    store.put_parquet(stage_b_sample_table("base"), pl.DataFrame({"policy": ["base", "base"], "sample": [0, 1]}))
    greedy, samples = parsed_tables(store, plan)
    assert greedy["policy"].to_list() == ["base", "answer_potential"] and samples["sample"].to_list() == [0, 1]
