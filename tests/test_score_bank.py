"""Parity gate, score bank and R1 labels: smoke materialization, fail-closed gate, selection rules.
The gate's rule (which instrument scores after a failed gate) and the runner's path: test_parity_gate.py."""

import re
import shutil

import dagster as dg
import polars as pl
import pytest

from apsft_dagster.core.instruments import BatchedInstrument
from apsft_dagster.core.layout import PARITY_GATE
from apsft_dagster.core.parity import METRICS, calibration_traces, parity_report
from apsft_dagster.core.store import Store
from apsft_dagster.experiment.assets.score_bank import parity_gate, score_bank
from apsft_dagster.experiment.partitions import train_task_partitions
from apsft_dagster.run_tags import single_run_tags
from conftest import smoke_resources, variant_config

KEYS = train_task_partitions.get_partition_keys()


def test_smoke_materializes_gate_scores_and_rollouts_with_every_check_passing(smoke_run):
    results, store = smoke_run
    for stage in ("parity_gate", "score_bank", "score_bank_index", "r1_labels", "r1_labels_index"):
        assert results[stage].success, stage
        assert all(e.passed for e in results[stage].get_asset_check_evaluations()), stage
    checks = {e.check_name for s in ("score_bank_index", "r1_labels_index")
              for e in results[s].get_asset_check_evaluations()}
    assert checks == {"every_eligible_scored_once", "no_ineligible_scored", "finite_values", "hash_parity",
                      "every_scored_rolled_once", "no_unscored_rolled"}
    gate = results["parity_gate"].get_asset_materialization_events()[0].materialization.metadata
    assert {f"max_abs_{m}" for m in METRICS} <= set(gate) and gate["passed"].value
    assert all(gate[f"max_abs_{m}"].value < 1e-3 for m in METRICS)  # same model, CPU float32: padding-only noise
    scores = pl.concat([store.get_parquet(f"score_bank/shards/{t}.parquet") for t in KEYS])
    labels = pl.concat([store.get_parquet(f"r1_labels/shards/{t}.parquet") for t in KEYS])
    assert scores["trace_id"].sort().to_list() == labels["trace_id"].sort().to_list()
    assert (scores["instrument"] == "reference").all()
    assert scores["answer_gain"].std() > 0 and scores["joint_gain"].std() > 0  # traces differ in quality
    assert 0 < labels["success"].sum() < labels.height


def test_calibration_is_chosen_from_metadata_round_robin_over_cells():
    bank = pl.DataFrame({"trace_id": [f"{f}-L{lv}/{i}" for f in "ab" for lv in (1, 2) for i in range(5)],
                         "family": [f for f in "ab" for _ in range(10)],
                         "level": [lv for _ in "ab" for lv in (1, 2) for _ in range(5)],
                         "eligible": [i != 0 for _ in range(4) for i in range(5)]})
    chosen = calibration_traces(bank, 6, seed=42)
    assert chosen.height == 6 and chosen["eligible"].all()
    cells = list(zip(chosen["family"], chosen["level"]))
    assert cells[:4] == [("a", 1), ("a", 2), ("b", 1), ("b", 2)]  # one per cell before any cell repeats
    assert chosen.equals(calibration_traces(bank.reverse(), 6, seed=42))  # order-independent


def test_parity_report():
    ref = [{m: 0.0 for m in METRICS}, {m: 1.0 for m in METRICS}]
    fast = [{m: 0.1 for m in METRICS}, {**{m: 1.0 for m in METRICS}, "joint_gain": 1.4}]
    report = parity_report(ref, fast, 0.15)
    assert report["metrics"]["joint_gain"] == pytest.approx(0.4)
    assert report["metrics"]["answer_mean"] == pytest.approx(0.1)
    assert report["means"]["joint_gain"] == pytest.approx(0.25)
    assert report["means"]["answer_mean"] == pytest.approx(0.05)
    assert not report["passed"] and report["worst_metric"] == "joint_gain"
    with pytest.raises(ValueError, match="one fast score per reference score"):
        parity_report(ref, fast[:1], 0.15)


def test_forced_parity_failure_blocks_fast_scoring_where_the_profile_says_stop(smoke_run, tmp_path, monkeypatch):
    _, reference = smoke_run
    store = Store(tmp_path / "s")
    shutil.copytree(reference.root, store.root,
                    ignore=shutil.ignore_patterns("score_bank", "r1_labels", PARITY_GATE + "*"))
    original = BatchedInstrument.score
    monkeypatch.setattr(BatchedInstrument, "score", lambda self, items: [
        {**r, "answer_logprob": r["answer_logprob"] + 0.5 * r["n_answer_tokens"]} for r in original(self, items)])
    path = variant_config(tmp_path, lambda raw: raw["scoring"].update(instrument="fast", on_failed_gate="stop"))
    resources = smoke_resources(store.root, config_path=str(path))

    gate = dg.materialize([parity_gate], resources=resources, raise_on_error=False)
    [check] = gate.get_asset_check_evaluations()
    assert not gate.success and check.severity == dg.AssetCheckSeverity.ERROR  # blocking, as the profile says
    assert not check.passed and re.search(r"answer_mean: 0\.5000\d+ > 0\.15", check.metadata["first_problems"].value)
    assert store.get_json(PARITY_GATE)["passed"] is False  # the failed receipt is kept

    scored = dg.materialize([score_bank], resources=resources, tags=single_run_tags(KEYS), raise_on_error=False)
    assert not scored.success
    failure = next(e for e in scored.all_events if e.event_type_value == "STEP_FAILURE")
    assert re.search(r"ParityError: parity gate failed: \w+_mean differs by 0\.5000\d+",
                     failure.event_specific_data.error.to_string())
    assert not (store.root / "score_bank").exists()
