"""Domain rules that guard the indexes and the manifest, on hand-made frames."""

import polars as pl

from apsft_dagster.core.config import Split
from apsft_dagster.core.score_bank import join_problems
from apsft_dagster.core.selection.sft_arms import digest_of, manifest_problems


def test_join_names_missing_repeated_and_unexpected_traces():
    expected = pl.DataFrame({"trace_id": ["a", "b", "c"]})
    derived = pl.DataFrame({"trace_id": ["b", "a", "b", "d"]})
    once, extra = join_problems(expected, derived, "scored")
    assert once == ["b: scored 2 times", "c: scored 0 times"]
    assert extra == ["d: scored but not expected"]
    assert join_problems(expected, expected, "scored") == ([], [])


def test_manifest_problems_count_rows_and_compare_rerun_digests():
    split = Split(families=["caravan"], levels=[1], per_cell=1, total=1)
    row = {"arm": "answer_potential", "task_id": "caravan-L1-000", "family": "caravan", "level": 1,
           "source_task_id": "caravan-L1-000", "source_trace_id": "t1", "mode": "best", "gap": 0.0,
           "n_thought_tokens": 3, "thought": "x", "prompt": "p", "answer": "1"}
    two = pl.DataFrame([row, {**row, "source_trace_id": "t2", "mode": "near_best_diverse"}])
    rows = {"answer_potential": two}
    assert manifest_problems(rows, {"answer_potential": digest_of(two)}, {"answer_potential": two}, split) == {
        "per_cell_balance": [], "rows_per_arm": [], "byte_identical_rerun": []}
    one = two.head(1)
    found = manifest_problems({"answer_potential": one}, {"answer_potential": digest_of(two)},
                              {"answer_potential": one}, split)
    assert found["rows_per_arm"] == ["answer_potential: 1 rows, expected 2"]
    assert found["per_cell_balance"] == ["answer_potential caravan-L1-000: 1 rows, expected 2"]
    assert found["byte_identical_rerun"] == [
        f"sft_arms/answer_potential.jsonl.gz: stored {digest_of(two)}, rerun {digest_of(one)}"]
