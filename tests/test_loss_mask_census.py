"""The census against counts taken independently from the planted truth."""

import json
from collections import Counter

import pytest

from apsft_dagster.core.loss_mask import LossMaskError
from apsft_dagster.core.loss_mask.census import census
from apsft_dagster.core.loss_mask.dataset import planted_rows


def _expected(pairs) -> dict:
    by_source: dict = {}
    for row, truth in pairs:
        t = by_source.setdefault(row["source"], {"rows": 0, "assistant_turns": 0, "masked_turns": 0,
                                                 "rows_touched": 0, "reasons": Counter(),
                                                 "combinations": Counter(), "left_alone": Counter()})
        t["rows"] += 1
        t["assistant_turns"] += sum(m["role"] == "assistant" for m in row["messages"])
        t["masked_turns"] += len(truth.flags)
        t["rows_touched"] += 1 if truth.flags else 0
        for reasons in truth.flags.values():
            t["reasons"].update(reasons)
            t["combinations"]["+".join(sorted(reasons))] += 1
        t["left_alone"].update(truth.left_alone.values())
    return by_source


def test_census_counts_equal_the_planted_truth_per_source_and_in_total():
    pairs = list(planted_rows(800, seed=5))
    found = census(json.dumps(row) + "\n" for row, _ in pairs)
    expected = _expected(pairs)
    assert set(found["by_source"]) == set(expected)
    for source, tally in expected.items():
        got = found["by_source"][source]
        assert {k: got[k] for k in ("rows", "assistant_turns", "masked_turns", "rows_touched")} == {
            k: tally[k] for k in ("rows", "assistant_turns", "masked_turns", "rows_touched")}, source
        for key in ("reasons", "combinations", "left_alone"):
            assert got[key] == dict(tally[key]), (source, key)
    assert found["total"]["rows"] == 800
    assert found["total"]["reasons"]["stall"] == sum(t["reasons"]["stall"] for t in expected.values())
    assert "stall+terminus-json" in found["total"]["combinations"]  # a planted two-reason turn


def test_census_is_deterministic_and_names_a_bad_line():
    lines = [json.dumps(row) for row, _ in planted_rows(50, seed=1)]
    assert json.dumps(census(lines)) == json.dumps(census(iter(lines)))
    with pytest.raises(LossMaskError, match="data.jsonl line 3: not valid JSON"):
        census([lines[0], "", "{oops", lines[1]], source_name="data.jsonl")
