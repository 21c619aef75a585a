"""The compute budget gate, both ways, and the dated amendment that alone may raise the budget."""

import pytest

from apsft_dagster.core.amendments import record_amendment
from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import AmendmentError, BudgetError
from apsft_dagster.core.layout import SFT_MANIFEST
from apsft_dagster.core.policies import stage_a_policies
from apsft_dagster.core.selection.arms import ARMS
from apsft_dagster.core.store import Store
from apsft_dagster.core.training.gate import budget_gate, estimate

TOKENS = dict(zip(ARMS, (7_129_440, 7_620_122, 6_999_860, 2_259_430, 3_308_702, 7_129_440)))  # registered, 2 epochs


def _manifest(tokens=TOKENS):
    return {"arms": [{"arm": a, "sha256": f"{i:064x}", "forward_tokens": t} for i, (a, t) in enumerate(tokens.items())]}


def test_the_registered_matrix_estimate():
    """34,446,994 forward tokens at full's envelope, the registered one: 9.5686 h at 1,000 tokens/s, 18.0539 h at
    530 (the seed's 9.6-18.1 GPU-hours)."""
    envelope = load_config("full", require_snapshot=False).training.throughput_tokens_per_s
    assert (envelope.low, envelope.high) == (530.0, 1000.0)
    policies = stage_a_policies(load_config("smoke"))
    fast, slow = estimate(_manifest(), policies, envelope.high), estimate(_manifest(), policies, envelope.low)
    assert fast["forward_tokens"] == sum(TOKENS.values()) == 34_446_994
    assert fast["device_hours"] == pytest.approx(9.5686, abs=1e-4)
    assert slow["device_hours"] == pytest.approx(18.0539, abs=1e-4)
    assert slow["per_policy"]["joint_potential-seed42"] == pytest.approx(7_620_122 / 530 / 3600)


def test_over_budget_fails_with_estimate_budget_and_per_arm_breakdown(tmp_path):
    config = load_config("smoke")  # budget 2.0 device-hours
    store = Store(tmp_path)
    with pytest.raises(BudgetError) as err:
        budget_gate(store, config, _manifest(), stage_a_policies(config), 4000.0, measured=True)
    text = str(err.value)
    assert "2.3922 device-hours" in text and "budget of 2.0 device-hours" in text and "measured warm-up" in text
    assert all(f"{arm}-seed42: " in text for arm in ARMS) and "apsft amend --budget-device-hours" in text


def test_within_budget_passes_and_records_its_source(tmp_path):
    config = load_config("smoke")
    small = {a: 1000 for a in ARMS}
    gate = budget_gate(Store(tmp_path), config, _manifest(small), stage_a_policies(config), 400.0, measured=False)
    assert gate["within_budget"] and gate["device_hours"] == pytest.approx(6000 / 400 / 3600)
    assert gate["budget_source"] == "config training.budget_device_hours"
    assert gate["throughput_source"] == "config envelope (low)"


def test_only_an_amendment_recorded_after_the_manifest_raises_the_budget(tmp_path):
    config = load_config("smoke")
    store = Store(tmp_path)
    early = record_amendment(store, "budget before any selection", "2026-11-01", budget_device_hours=10.0)
    assert early["selection"] is None
    store.put_json(SFT_MANIFEST, _manifest())
    with pytest.raises(BudgetError, match="budget of 2.0 device-hours"):  # recorded before this manifest: not honoured
        budget_gate(store, config, _manifest(), stage_a_policies(config), 4000.0, measured=True)
    record_amendment(store, "three device-hours approved for the full matrix", "2026-11-30", budget_device_hours=3.0)
    gate = budget_gate(store, config, _manifest(), stage_a_policies(config), 4000.0, measured=True)
    assert gate["within_budget"] and gate["budget_device_hours"] == 3.0 and gate["amendment_seq"] == 2
    assert gate["budget_source"].startswith("amendment 2 of 2026-11-30: three device-hours")
    other = _manifest({a: t + 1 for a, t in TOKENS.items()})
    other["arms"][0]["sha256"] = "f" * 64  # another selection: the amendment does not carry over
    with pytest.raises(BudgetError):
        budget_gate(store, config, other, stage_a_policies(config), 4000.0, measured=True)
    for bad in (0.0, float("inf"), float("nan")):
        with pytest.raises(AmendmentError, match="must be a finite number > 0"):
            record_amendment(store, "nothing", budget_device_hours=bad)


def test_cli_amend_records_a_budget(tmp_path, capsys):
    from apsft_dagster.cli import main

    store = Store(tmp_path)
    store.put_json(SFT_MANIFEST, _manifest())
    assert main(["amend", "--store", str(tmp_path), "--budget-device-hours", "20", "approved 20 h"]) == 0
    assert "training budget: 20.0 device-hours" in capsys.readouterr().out
    assert budget_gate(store, load_config("smoke"), _manifest(), stage_a_policies(load_config("smoke")), 4000.0,
                       measured=True)["budget_device_hours"] == 20.0


def test_the_smoke_budget_decision_does_not_move_beside_a_busy_core(smoke_run):
    """The warm-up measured quietly and again while another process spins on a core: the smoke
    gate passes both times with room to spare (the 6.5x slow-down once seen would still fit),
    since the count is one pinned thread and only steady-state steps are timed."""
    import subprocess
    import sys

    from apsft_dagster.core.base_model import base_model_path
    from apsft_dagster.core.engines.lifetime import require_device
    from apsft_dagster.core.training.gate import verified_manifest
    from apsft_dagster.core.training.policy import warmup_tokens_per_s

    _, store = smoke_run
    config = load_config("smoke")
    manifest, _, _ = verified_manifest(store, config)
    base, policies = str(base_model_path(config, store)), stage_a_policies(config)
    require_device(config.compute, "training", config.profile)
    decisions = []
    for busy in (False, True):
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
        try:
            tokens_per_s = warmup_tokens_per_s(store, config, base, manifest["arms"][0]["arm"])
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
        decisions.append(budget_gate(store, config, manifest, policies, tokens_per_s, measured=True))
    assert [d["within_budget"] for d in decisions] == [True, True]
    assert all(d["device_hours"] * 6.5 < d["budget_device_hours"] for d in decisions), decisions


# Stage B's outlook at Stage A's gate (core/budget.py), on hand-made forward tokens: Stage A's six sum to
# 500,000; the costliest pair Stage A could lead to is joint_potential (120,000, the larger potential arm)
# with random_natural (90,000, the largest baseline): 210,000 more, 710,000 in all.
HAND = dict(zip(ARMS, (100_000, 120_000, 90_000, 50_000, 40_000, 100_000)))
PAIR = ["joint_potential-seed43", "random_natural-seed43"]


def _stage_a_gate(tmp_path, tokens_per_s):
    from apsft_dagster.core.budget import stage_b_outlook

    config = load_config("smoke")  # budget 2.0 device-hours
    matrix = stage_a_policies(config)
    gate = budget_gate(Store(tmp_path), config, _manifest(HAND), matrix, tokens_per_s, measured=True)
    return gate, stage_b_outlook(_manifest(HAND), config, matrix, gate)


def test_stage_a_alone_is_priced_and_stage_b_own_gate_gets_no_outlook(tmp_path):
    from apsft_dagster.core.budget import costliest_pair, stage_b_outlook

    config = load_config("smoke")
    assert costliest_pair(_manifest(HAND), config) == PAIR
    gate, _ = _stage_a_gate(tmp_path, 100.0)
    assert gate["forward_tokens"] == 500_000 and gate["device_hours"] == pytest.approx(1.388889, abs=1e-6)
    matrix = stage_a_policies(config) + PAIR  # replication_adapters: its gate prices the pair itself
    own = budget_gate(Store(tmp_path), config, _manifest(HAND), matrix, 100.0, measured=True)
    assert own["device_hours"] == pytest.approx(1.972222, abs=1e-6)
    assert stage_b_outlook(_manifest(HAND), config, matrix, own) is None


def test_stage_a_and_stage_b_fit(tmp_path):
    """100 tokens/s: Stage A 500,000 / 100 / 3,600 = 1.3889 h, with the pair 710,000 / 100 / 3,600 = 1.9722 h <= 2.0."""
    gate, outlook = _stage_a_gate(tmp_path, 100.0)
    assert outlook["within_budget"] and outlook["priced_policies"] == PAIR
    assert outlook["forward_tokens"] == 710_000 and outlook["device_hours"] == pytest.approx(1.972222, abs=1e-6)
    assert outlook["message"].startswith("Stage B would fit: ") and "1.9722 device-hours" in outlook["message"]


def test_stage_a_fits_and_stage_b_would_not_said_before_training(tmp_path):
    """90 tokens/s: Stage A 500,000 / 90 / 3,600 = 1.5432 h passes; with the pair 710,000 / 90 / 3,600
    = 2.1914 h > 2.0."""
    gate, outlook = _stage_a_gate(tmp_path, 90.0)
    assert gate["within_budget"] and gate["device_hours"] == pytest.approx(1.543210, abs=1e-6)
    assert not outlook["within_budget"] and outlook["device_hours"] == pytest.approx(2.191358, abs=1e-6)
    text = outlook["message"]
    assert text.startswith("Stage B would not fit: ") and "(joint_potential-seed43, random_natural-seed43)" in text
    assert "2.1914 device-hours (710,000 forward tokens at 90 tokens/s" in text and "budget of 2.0" in text
    assert "Stage A trains: its own matrix, 1.5432 device-hours" in text and "apsft amend --budget-device-hours" in text


def test_the_asset_says_stage_b_will_not_fit_before_the_first_step(tmp_path):
    """The adapters asset's gate step (a stand-in context, store and warm-up): a warning, and the record."""
    from types import SimpleNamespace

    from apsft_dagster.experiment.assets.training import _gate

    config, said = load_config("smoke"), []
    context = SimpleNamespace(partition_keys=stage_a_policies(config),
                              log=SimpleNamespace(info=lambda m: said.append(("info", m)),
                                                  warning=lambda m: said.append(("warning", m))))
    experiment = SimpleNamespace(config=lambda: config, store=lambda: Store(tmp_path))
    gate = _gate(context, experiment, SimpleNamespace(warmup=lambda arm: 90.0), _manifest(HAND), ARMS[0])
    assert gate["stage_b"]["device_hours"] == pytest.approx(2.191358, abs=1e-6)
    assert said[-1][0] == "warning" and said[-1][1].startswith("budget gate: Stage B would not fit")
