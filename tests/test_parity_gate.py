"""The parity gate as registered (docs/PROTOCOL.md §6). The rule, on hand-made gate receipts: which instrument
scores the bank and why (core/parity.py `scoring_instrument`). The runner, on a tiny graph: a failed WARN check is
listed and alerted once, never a stop. On smoke's bank: a fast instrument that fails its gate never scores (the
reference does, or the run stops), and a failed gate with the reference instrument runs to a verdict."""

import json
import re
import shutil

import dagster as dg
import polars as pl
import pytest

from apsft_dagster.assets.common import check_result
from apsft_dagster.cli.experiment.presentation import summary
from apsft_dagster.core.alerts import alert_path
from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import ParityError
from apsft_dagster.core.layout import PARITY_GATE, REPORT_MARKDOWN, SCORE_BANK, STAGE_B_DECISION, shard_file
from apsft_dagster.core.parity import METRICS, gate_outcome, parity_report, scoring_instrument, verdict_scoring
from apsft_dagster.core.report import _harvest_and_parity
from apsft_dagster.core.store import Store
from apsft_dagster.experiment.partitions import train_task_partitions
from apsft_dagster.runner import run_stages, select_stages
from apsft_dagster.stage import Stage
from conftest import smoke_definitions, variant_config

KEYS = train_task_partitions.get_partition_keys()
FAILED = "the fast instrument failed its parity gate: joint_gain 0.692447 > 0.15"


def _gate(joint_gain: float, threshold: float = 0.15) -> dict:
    """A receipt where the fast instrument differs from the reference by `joint_gain` on one metric only."""
    reference = [{m: 0.0 for m in METRICS}]
    return parity_report(reference, [{**reference[0], "joint_gain": joint_gain}], threshold)


def _config(**scoring):
    smoke = load_config("smoke")
    return smoke.model_copy(update={"scoring": smoke.scoring.model_copy(update=scoring)})


@pytest.mark.parametrize("scoring, joint_gain, expected", [
    ({}, 0.01, ("reference", "reference (configured)")),
    ({}, None, ("reference", "reference (configured)")),
    ({}, 0.692447, ("reference", f"reference (configured; {FAILED})")),
    ({"instrument": "fast"}, 0.01, ("fast", "fast (configured; it passed its parity gate: worst joint_gain "
                                            "0.01 <= 0.15)")),
    ({"instrument": "fast"}, 0.692447, ("reference", f"reference ({FAILED}; scoring.on_failed_gate: reference)")),
])
def test_the_rule_names_the_instrument_that_scores_and_why(scoring, joint_gain, expected):
    assert scoring_instrument(None if joint_gain is None else _gate(joint_gain), _config(**scoring)) == expected


def test_a_fast_instrument_that_failed_its_gate_never_scores():
    failed = _gate(0.692447)
    with pytest.raises(ParityError, match=r"joint_gain differs by 0\.692447 nats/token \(> 0\.15\).*Ways out: "
                                          r"scoring\.on_failed_gate: reference or scoring\.instrument: reference"):
        scoring_instrument(failed, _config(instrument="fast", on_failed_gate="stop"))
    with pytest.raises(ParityError, match="no parity gate receipt exists; materialize parity_gate first"):
        scoring_instrument(None, _config(instrument="fast"))
    for instrument in ("reference", "fast"):
        for then in ("reference", "stop"):
            try:
                chosen, _ = scoring_instrument(failed, _config(instrument=instrument, on_failed_gate=then))
            except ParityError:
                continue
            assert chosen == "reference", (instrument, then)


def test_the_gates_check_blocks_only_where_the_profile_says_stop():
    failed = _gate(0.692447)
    assert gate_outcome(failed, _config()) == (
        False, "recorded: joint_gain 0.692447 > 0.15; scoring continues on the reference instrument")
    assert gate_outcome(failed, _config(instrument="fast")) == gate_outcome(failed, _config())
    stops, note = gate_outcome(failed, _config(instrument="fast", on_failed_gate="stop"))
    assert stops and note.startswith("parity gate failed: joint_gain differs by 0.692447")
    assert gate_outcome(_gate(0.01), _config(on_failed_gate="stop")) == (
        False, "passed; scoring instrument: reference (configured)")


def test_the_verdict_states_a_failed_gate_and_the_report_names_it():
    failed, passed = _gate(0.692447), _gate(0.01)
    assert verdict_scoring(passed, _config()) is None  # a passed gate: the document keeps the bytes it had
    assert verdict_scoring(failed, _config(instrument="fast")) == {
        "instrument": "reference", "reason": f"reference ({FAILED}; scoring.on_failed_gate: reference)",
        "parity_gate": {"passed": False, "worst_metric": "joint_gain", "worst_value": 0.692447, "threshold": 0.15}}
    funnel = {"tasks": 2, "excluded_tasks": []}
    [line] = [x for x in _harvest_and_parity(_config(), {"funnel": funnel, "parity": failed}) if "Worst" in x]
    assert line == (f"Worst metric joint_gain = 0.692447 against threshold 0.15: failed (scoring instrument: "
                    f"reference (configured; {FAILED})).")
    [line] = [x for x in _harvest_and_parity(_config(), {"funnel": funnel, "parity": passed}) if "Worst" in x]
    assert line == "Worst metric joint_gain = 0.010000 against threshold 0.15: passed (scoring instrument: reference)."


@dg.asset(key_prefix="gate", check_specs=[dg.AssetCheckSpec("within", asset=["gate", "gated"], blocking=True)])
def gated():
    yield dg.Output(1)
    yield check_result("within", ["joint_gain: 0.7 > 0.15"], blocks=False, description="recorded: the run goes on")


@dg.asset(key_prefix="gate", deps=[gated])
def after():
    return 2


def test_a_failed_warn_check_is_listed_alerted_once_and_never_a_stop(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("APSFT_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("APSFT_ALERT_WEBHOOK", raising=False)
    stages = [Stage("gated_job", (gated,)), Stage("after_job", (after,))]
    defs = dg.Definitions(assets=[gated, after], jobs=[dg.define_asset_job(s.job, selection=list(s.assets))
                                                        for s in stages])
    outcomes = run_stages(defs, dg.DagsterInstance.ephemeral(), stages)
    assert [(o.job, o.ok) for o in outcomes] == [("gated_job", True), ("after_job", True)]
    assert outcomes[0].checks == [("gate/gated", "within", False)] and outcomes[0].recorded == [("gate/gated",
                                                                                                  "within")]
    [line] = [json.loads(x) for x in alert_path().read_text().splitlines()]
    assert (line["kind"], line["check_name"], line["severity"]) == ("asset_check_failed", "within", "WARN")
    assert summary(outcomes, stages, str(tmp_path / "store")) == 0
    shown = capsys.readouterr().out
    assert "2/2 stages succeeded" in shown and "checks 0/1 passed (1 failed, recorded)" in shown
    assert "  gate/gated:within failed (recorded: the run goes on)\n" in shown


def _bank_only(source: Store, root) -> Store:
    """A copy of the smoke store up to its trace bank: the gate and everything after it are still to run."""
    store = Store(root)
    shutil.copytree(source.root, store.root, ignore=lambda folder, names: [
        n for n in names if folder == str(source.root) and not n.startswith(("task_catalog", "base_model",
                                                                              "trace_bank"))])
    return store


def _scores(store: Store) -> pl.DataFrame:
    return pl.concat([store.get_parquet(shard_file(SCORE_BANK, t)) for t in KEYS]).select(
        "trace_id", "answer_gain", "joint_gain", "instrument")


def _failing_fast(monkeypatch) -> None:
    """The fast instrument off by 0.5 nats per answer token: its gate fails on answer_mean."""
    from apsft_dagster.core.instruments import BatchedInstrument

    original = BatchedInstrument.score
    monkeypatch.setattr(BatchedInstrument, "score", lambda self, items: [
        {**r, "answer_logprob": r["answer_logprob"] + 0.5 * r["n_answer_tokens"]} for r in original(self, items)])


@pytest.mark.parametrize("then", ["reference", "stop"])
def test_a_fast_instrument_that_fails_its_gate_switches_to_the_reference_or_stops(smoke_run, tmp_path, monkeypatch,
                                                                                     then, capsys):
    from apsft_dagster.experiment.stages import STAGES

    monkeypatch.setenv("APSFT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("APSFT_ALERT_WEBHOOK", raising=False)
    _, source = smoke_run
    store = _bank_only(source, tmp_path / "store")
    _failing_fast(monkeypatch)
    path = variant_config(tmp_path, lambda raw: raw["scoring"].update(instrument="fast", on_failed_gate=then))
    stages = select_stages(STAGES, "bank_and_parity_job", "score_bank_job")
    outcomes = run_stages(smoke_definitions(store.root, config_path=str(path)), dg.DagsterInstance.ephemeral(), stages)
    assert store.get_json(PARITY_GATE)["passed"] is False  # answer_mean or empty_answer_mean, 0.5 nats off
    alerts = [json.loads(x) for x in alert_path().read_text().splitlines()]
    summary(outcomes, stages, str(store.root))
    shown = capsys.readouterr().out
    if then == "reference":
        assert [o.ok for o in outcomes] == [True, True]
        assert outcomes[0].recorded == [("parity_gate", "within_threshold")]
        assert _scores(store).equals(_scores(source))  # the reference instrument scored: smoke's scores exactly
        assert [(a["check_name"], a["severity"]) for a in alerts] == [("within_threshold", "WARN")]
        assert re.search(r"parity_gate:within_threshold failed \(recorded: \w*answer_mean 0\.5\d* > 0\.15; scoring "
                         r"continues on the reference instrument\)", shown)
    else:
        assert [o.job for o in outcomes] == ["bank_and_parity_job"] and not outcomes[0].ok
        assert not (store.root / SCORE_BANK).exists()  # nothing scored
        assert sorted(a["kind"] for a in alerts) == ["asset_check_failed", "run_failed"]
        assert re.search(r"check parity_gate:within_threshold failed: parity gate failed: \w*answer_mean differs by "
                         r"0\.5000\d+ .* Ways out: scoring\.on_failed_gate: reference", shown)


@pytest.mark.after_the_run
def test_a_failed_gate_with_the_reference_instrument_runs_to_a_verdict(smoke_run, tmp_path, monkeypatch, capsys):
    """The registered path (the seed's gate failed at 0.692 > 0.15 and it scored on): smoke with a threshold no
    instrument pair meets runs its gate, scores its bank and reaches the verdict; one alert, the report names the
    failed gate. The stages between the score bank and the verdict read only the bank's scores, which equal
    smoke's, so they are smoke's own (README command 1 runs every stage with a failed gate: the closing note of
    issue 58)."""
    from apsft_dagster.experiment.stages import STAGES

    monkeypatch.setenv("APSFT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("APSFT_ALERT_WEBHOOK", raising=False)
    _, source = smoke_run
    store = Store(tmp_path / "store")
    shutil.copytree(source.root, store.root)
    for name in (PARITY_GATE, SCORE_BANK, STAGE_B_DECISION, REPORT_MARKDOWN):
        store.remove(name)
    path = variant_config(tmp_path, lambda raw: raw["scoring"].update(parity_threshold=1.0e-12))
    wanted = ("bank_and_parity_job", "score_bank_job", "score_bank_index_job", "verdict_and_report_job")
    stages = [s for s in STAGES if s.job in wanted]
    outcomes = run_stages(smoke_definitions(store.root, config_path=str(path)), dg.DagsterInstance.ephemeral(), stages)
    assert all(o.ok for o in outcomes) and len(outcomes) == len(stages), [o.job for o in outcomes if not o.ok]
    assert [c for o in outcomes for c in o.recorded] == [("parity_gate", "within_threshold")]
    [alert] = [json.loads(x) for x in alert_path().read_text().splitlines()]
    assert (alert["kind"], alert["check_name"], alert["severity"]) == ("asset_check_failed", "within_threshold", "WARN")
    gate = store.get_json(PARITY_GATE)
    finding = f"{gate['worst_metric']} {gate['worst_value']:.6g} > 1e-12"
    reason = f"reference (configured; the fast instrument failed its parity gate: {finding})"
    assert not gate["passed"] and _scores(store).equals(_scores(source))
    final, smoke_final = store.get_json(STAGE_B_DECISION), source.get_json(STAGE_B_DECISION)
    assert final["scoring"] == {"instrument": "reference", "reason": reason, "parity_gate": {
        "passed": False, "worst_metric": gate["worst_metric"], "worst_value": gate["worst_value"], "threshold": 1e-12}}
    assert final["final_verdict"] == smoke_final["final_verdict"] and "scoring" not in smoke_final
    report = store.get_bytes(REPORT_MARKDOWN).decode()
    assert f"- Scoring instrument: {reason}\n" in report
    assert f"against threshold 1e-12: failed (scoring instrument: {reason}).\n" in report
    assert summary(outcomes, stages, str(store.root)) == 0
    shown = capsys.readouterr().out
    assert f"parity_gate:within_threshold failed (recorded: {finding}; scoring continues on the reference " \
           "instrument)" in shown and f"  scoring instrument: {reason}\n" in shown
