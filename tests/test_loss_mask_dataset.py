"""The synthetic agentic dataset: deterministic, every class planted, and the rules find exactly the truth."""

import json
from collections import Counter

from apsft_dagster.core.loss_mask import flag_row, left_alone
from apsft_dagster.core.loss_mask.dataset import HARNESSES, planted_rows

REASONS = {"terminus-json", "stall", "false-claim", "toolcall-syntax", "prose-command"}


def test_same_seed_same_bytes_other_seed_other_rows():
    first = [json.dumps(r, sort_keys=True) for r, _ in planted_rows(300, seed=7)]
    assert first == [json.dumps(r, sort_keys=True) for r, _ in planted_rows(300, seed=7)]
    assert first != [json.dumps(r, sort_keys=True) for r, _ in planted_rows(300, seed=8)]


def test_every_defect_and_left_alone_case_is_planted_in_every_harness_it_belongs_to():
    reasons, alone, harnesses = Counter(), Counter(), Counter()
    for row, truth in planted_rows(600, seed=11):
        harnesses[row["harness"]] += 1
        reasons.update((row["harness"], r) for rs in truth.flags.values() for r in rs)
        alone.update(truth.left_alone.values())
    assert set(harnesses) == set(HARNESSES)
    assert {r for _, r in reasons} == REASONS
    assert {h for h, r in reasons if r == "stall"} == set(HARNESSES)
    assert set(alone) == {"false_claim_with_command", "prose_only"}


def test_the_rules_find_exactly_what_was_planted_and_count_what_they_leave_alone():
    for row, truth in planted_rows(1500, seed=3):
        assert flag_row(row) == truth.flags, row["row_id"]
        assert left_alone(row) == {i: frozenset({label}) for i, label in truth.left_alone.items()}, row["row_id"]
