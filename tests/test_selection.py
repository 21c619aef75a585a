"""Selection rules against hand-computed cases; the shuffle's optimum against scipy."""

import numpy as np
import polars as pl
import pytest
from scipy.optimize import linear_sum_assignment

from apsft_dagster.core.errors import BalanceError, InfeasibleAssignmentError
from apsft_dagster.core.selection import select_arms  # the public path (README)
from apsft_dagster.core.selection.assignment import min_cost_assignment
from apsft_dagster.core.selection.rules import distances_to_best, skeletons, structural_distance, top_traces


def frame(rows):
    base = {"family": "caravan", "level": 1, "eligible": True, "r1_success": False, "joint_gain": 0.0}
    return pl.DataFrame([{**base, **r} for r in rows])


def t(task, trace, gain, n, thought="x 1", **extra):
    return {"task_id": task, "trace_id": f"{task}/{trace}", "answer_gain": gain, "n_thought_tokens": n,
            "thought": thought, **extra}


def two_task_cell(task_a_rows):
    """Task A under test plus a plain task B in the same cell (so the shuffle is feasible)."""
    b = [t("B", f"{i}", 0.1 * i, 50 + i, r1_success=True) for i in range(4)]
    return frame(task_a_rows + b)


def test_best_then_most_distant_in_band():
    rows = [t("A", "1", 1.0, 10, "A 1\nB 2"), t("A", "2", 0.9, 11, "A 3\nB 4"),
            t("A", "3", 0.8, 12, "C 5\nD 6\nE 7"), t("A", "4", 0.1, 13, "Z 1")]
    arm = select_arms(two_task_cell(rows), seed=1)["answer_potential"].filter(pl.col("task_id") == "A")
    assert arm["source_trace_id"].to_list() == ["A/1", "A/3"]  # A/2 shares A/1's skeleton; A/4 is out of band
    assert arm["mode"].to_list() == ["best", "near_best_diverse"]
    assert arm["gap"].to_list() == pytest.approx([0.0, 0.2])


def test_fallback_to_second_ranked_when_band_is_empty():
    rows = [t("A", "1", 1.0, 10), t("A", "2", 0.5, 11), t("A", "3", 0.4, 12)]
    arm = select_arms(two_task_cell(rows), seed=1)["answer_potential"].filter(pl.col("task_id") == "A")
    assert arm["source_trace_id"].to_list() == ["A/1", "A/2"]
    assert arm["mode"].to_list() == ["best", "fallback_second"] and arm["gap"][1] == pytest.approx(0.5)


def test_ties_break_by_trace_id_and_top_k_bounds_the_band():
    rows = [t("A", "2", 1.0, 10, "P 1"), t("A", "1", 1.0, 10, "P 2"), t("A", "3", 0.99, 10, "Q 1\nR 2")]
    arm = select_arms(two_task_cell(rows), seed=1, top_k=2)["answer_potential"].filter(pl.col("task_id") == "A")
    assert arm["source_trace_id"].to_list() == ["A/1", "A/2"]  # A/3 (in band, distant) is outside the top 2


def test_structural_distance():
    assert structural_distance("Step 1: 3\nEnd 4", "Step 7: 9\nEnd 1") == (0.0, 0)
    assert structural_distance("a\nb", "a\nc\nd") == (pytest.approx(1 - 1 / 4), 1)


def test_random_natural_takes_nearest_length_outside_the_answer_arm():
    rows = [t("A", "1", 1.0, 100, "A 1"), t("A", "2", 0.9, 40, "B 1\nC 2"), t("A", "3", 0.0, 98),
            t("A", "4", 0.0, 45), t("A", "5", 0.0, 41)]
    arms = select_arms(two_task_cell(rows), seed=7)
    random = arms["random_natural"].filter(pl.col("task_id") == "A")
    assert arms["answer_potential"].filter(pl.col("task_id") == "A")["source_trace_id"].to_list() == ["A/1", "A/2"]
    assert random["source_trace_id"].to_list() == ["A/3", "A/5"]  # |98-100| and |41-40|


def test_success_rft_nearest_then_round_robin_repeats():
    rows = [t("A", "1", 1.0, 20), t("A", "2", 0.9, 30), t("A", "3", 0.0, 29, r1_success=True)]
    data = pl.concat([frame(rows), frame([t("C", str(i), 0.1, 10 + i) for i in range(2)])])
    data = pl.concat([data, frame([t("B", f"{i}", 0.1 * i, 50 + i, r1_success=i < 2) for i in range(4)])])
    arm = select_arms(data, seed=1)["success_rft"]
    assert arm.height == 6  # 3 retained tasks x 2
    base = arm.filter(pl.col("mode") == "nearest_success")["source_trace_id"].to_list()
    assert base == ["A/3", "B/1", "B/0"]  # A: one success; B: nearest to B's answer rows (53, then 52)
    assert arm.filter(pl.col("mode") == "repeat")["source_trace_id"].to_list() == ["A/3", "B/1", "B/0"]


def test_shortest_and_exclusion():
    rows = [t("A", "1", 1.0, 30), t("A", "2", 0.9, 12), t("A", "3", 0.0, 12), t("A", "4", 0.0, 5)]
    lone = frame([t("D", "1", 1.0, 10), t("D", "2", 1.0, 10, eligible=False)])
    arms = select_arms(pl.concat([two_task_cell(rows), lone]), seed=1)
    shortest = arms["shortest_natural"].filter(pl.col("task_id") == "A")
    assert shortest["source_trace_id"].to_list() == ["A/4", "A/2"]  # 5, then 12 (tie by trace id)
    assert all("D" not in f["task_id"].to_list() for f in arms.values())  # one eligible trace: excluded everywhere


def test_shuffle_is_an_exact_optimum_off_its_own_task():
    rng = np.random.default_rng(3)
    rows = [t(f"T{k}", str(i), float(rng.normal()), int(rng.integers(10, 500)), r1_success=i == 0)
            for k in range(6) for i in range(5)]
    arms = select_arms(frame(rows), seed=1)
    shuffle, answer = arms["potential_shuffle"], arms["answer_potential"]
    assert (shuffle["task_id"] != shuffle["source_task_id"]).all()
    assert sorted(shuffle["source_trace_id"].to_list()) == sorted(answer["source_trace_id"].to_list())  # same multiset
    lengths, tasks = answer["n_thought_tokens"].to_numpy(), answer["task_id"].to_list()
    cost = np.abs(lengths[:, None] - lengths[None, :]).astype(float)
    cost[np.array(tasks)[:, None] == np.array(tasks)[None, :]] = 1e9  # forbidden: own task
    r, c = linear_sum_assignment(cost)
    assert shuffle["length_cost"].sum() == cost[r, c].sum()


def test_hungarian_matches_scipy_on_random_matrices():
    rng = np.random.default_rng(0)
    for n in range(1, 14):
        cost = rng.integers(0, 100, size=(n, n))
        col = min_cost_assignment(cost.tolist())
        r, c = linear_sum_assignment(cost)
        assert sorted(col) == list(range(n)) and sum(cost[i, col[i]] for i in range(n)) == cost[r, c].sum()


def test_infeasible_shuffle_fails_closed():
    with pytest.raises(InfeasibleAssignmentError):
        min_cost_assignment([[None, 1], [None, 2]])
    with pytest.raises(BalanceError, match=r"potential_shuffle: \(caravan, L1\) has no assignment"):
        select_arms(frame([t("A", str(i), 0.1 * i, 10 + i, r1_success=True) for i in range(3)]), seed=1)  # one task


def test_no_success_anywhere_fails_closed():
    with pytest.raises(BalanceError, match="success_rft: no R1-successful"):
        select_arms(frame([t(k, str(i), 0.1 * i, 10 + i) for k in "AB" for i in range(3)]), seed=1)


def test_a_cell_short_of_its_configured_tasks_fails_closed():
    """per_cell=2: task C of (caravan, 2) has one eligible trace, so its cell retains 1 of 2 tasks."""
    rows = [t("A", "1", 1.0, 10), t("A", "2", 0.5, 11)]
    cell_two = [{**t(task, f"{i}", 0.1 * i, 20 + i, r1_success=True), "level": 2}
                for task, n in (("C", 1), ("D", 3)) for i in range(n)]
    candidates = pl.concat([two_task_cell(rows), frame(cell_two)])
    select_arms(candidates.filter(pl.col("level") == 1), seed=1, per_cell=2)  # the full cell passes
    with pytest.raises(BalanceError, match=r"\(caravan, L2\): 1 retained tasks, expected 2"):
        select_arms(candidates, seed=1, per_cell=2)


def test_bulk_distances_equal_the_definition_on_random_thoughts():
    """distances_to_best (Polars) against structural_distance (plain Python), odd whitespace included."""
    rng = np.random.default_rng(7)
    pieces = ["add 3", "add  12", "take\t4", "", "   ", "carry 7 to 9", "x 1\r", "Step 10: go", "é 5",
              "a\u00a0 b 2", "a \u2003b", " a b "]
    rows = [{"task_id": f"T{task}", "trace_id": f"T{task}/{i}", "answer_gain": float(rng.integers(0, 5)),
             "thought": "\n".join(rng.choice(pieces, rng.integers(0, 8))), "n_thought_tokens": 1}
            for task in range(30) for i in range(rng.integers(1, 9))]
    candidates = pl.DataFrame(rows)
    bulk = distances_to_best(top_traces(candidates, "answer_gain", 5), skeletons(candidates))
    for task, group in candidates.group_by("task_id"):
        top = sorted(group.to_dicts(), key=lambda r: (-r["answer_gain"], r["trace_id"]))[:5]
        for r in top:
            assert bulk[r["trace_id"]] == structural_distance(top[0]["thought"], r["thought"]), r["trace_id"]
    assert len(bulk) == sum(min(5, g.height) for _, g in candidates.group_by("task_id"))
