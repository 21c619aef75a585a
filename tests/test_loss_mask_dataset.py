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


def test_the_seed_shape_is_the_seed_size_and_rate_and_its_truth_is_what_the_rules_find():
    from apsft_dagster.core.loss_mask.dataset_seed import SEED_DEFECT_RATE, seed_shaped_rows

    sizes, touched, alone, assistant_bytes = [], 0, Counter(), 0
    for row, truth in seed_shaped_rows(1200, seed=3):
        assert flag_row(row) == truth.flags, row["row_id"]
        assert left_alone(row) == {i: frozenset({label}) for i, label in truth.left_alone.items()}, row["row_id"]
        sizes.append(len(json.dumps(row)))
        assistant_bytes += sum(len(json.dumps(m)) for m in row["messages"] if m["role"] == "assistant")
        touched += bool(truth.flags)
        alone.update(truth.left_alone.values())
    # the seed: 34,528,993,378 bytes / 742,665 rows = 46.5 KB a row, 38% of tokens assistant, 4.5% of rows touched
    assert 40_000 < sum(sizes) / len(sizes) < 52_000
    assert 0.30 < assistant_bytes / sum(sizes) < 0.45
    assert abs(touched / 1200 - SEED_DEFECT_RATE) < 3 * (SEED_DEFECT_RATE * (1 - SEED_DEFECT_RATE) / 1200) ** 0.5
    assert set(alone) == {"false_claim_with_command", "prose_only"}

    reasons = Counter()
    for row, truth in seed_shaped_rows(300, seed=4, defect_rate=0.6):
        assert flag_row(row) == truth.flags, row["row_id"]
        reasons.update((row["harness"], r) for rs in truth.flags.values() for r in rs)
    assert {r for _, r in reasons} == REASONS
    assert {h for h, r in reasons if r == "stall"} == set(HARNESSES)
