"""The per-cell balance rule on hand-made frames."""

import polars as pl

from apsft_dagster.core.balance import cell_problems, split_cells, tasks_per_cell
from apsft_dagster.core.config import Split
from apsft_dagster.core.selection.sft_arms import cell_balance_problems

SPLIT = Split(families=["caravan", "runeward"], levels=[1], per_cell=2, total=4)


def _rows(arm: str, tasks: dict[str, int]) -> list[dict]:
    """`tasks`: task id ("caravan-L1-000") -> number of rows."""
    return [{"arm": arm, "task_id": t, "family": t.split("-")[0], "level": 1}
            for t, n in tasks.items() for _ in range(n)]


def test_cell_problems_counts_missing_short_and_undeclared_cells():
    expected = split_cells(SPLIT)
    assert expected == {("caravan", 1): 2, ("runeward", 1): 2}
    assert cell_problems({("caravan", 1): 2, ("runeward", 1): 2}, expected) == []
    assert cell_problems({("caravan", 1): 2, ("spindle", 1): 1}, expected) == [
        "(runeward, L1): 0 tasks, expected 2", "(spindle, L1): 1 tasks in a cell the config does not declare"]


def test_tasks_per_cell_counts_distinct_tasks_not_rows():
    frame = pl.DataFrame(_rows("a", {"caravan-L1-000": 3, "caravan-L1-001": 1, "runeward-L1-000": 2}))
    assert tasks_per_cell(frame) == {("caravan", 1): 2, ("runeward", 1): 1}


def test_arm_balance_names_short_tasks_and_cells_and_exempts_success_rft():
    whole = {"caravan-L1-000": 2, "caravan-L1-001": 2, "runeward-L1-000": 2, "runeward-L1-001": 2}
    good = pl.DataFrame(_rows("answer_potential", whole) + _rows("success_rft", {"caravan-L1-000": 8}))
    assert cell_balance_problems(good, SPLIT) == []
    short = {**whole, "runeward-L1-001": 1}
    missing = {k: v for k, v in whole.items() if k != "caravan-L1-001"}
    bad = pl.DataFrame(_rows("answer_potential", short) + _rows("joint_potential", missing))
    assert cell_balance_problems(bad, SPLIT) == [
        "answer_potential runeward-L1-001: 1 rows, expected 2",
        "joint_potential (caravan, L1): 1 tasks, expected 2"]
