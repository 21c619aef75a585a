"""The compute budget gate, both ways, and the dated amendment that alone may raise the budget."""

import pytest

from apsft_dagster.core.amendments import record_amendment
from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import AmendmentError, BudgetError
from apsft_dagster.core.layout import SFT_MANIFEST
from apsft_dagster.core.selection.arms import ARMS
from apsft_dagster.core.store import Store
from apsft_dagster.core.training.gate import budget_gate, estimate
from apsft_dagster.core.policies import stage_a_policies

TOKENS = dict(zip(ARMS, (7_129_440, 7_620_122, 6_999_860, 2_259_430, 3_308_702, 7_129_440)))  # registered, 2 epochs


def _manifest(tokens=TOKENS):
    return {"arms": [{"arm": a, "sha256": f"{i:064x}", "forward_tokens": t} for i, (a, t) in enumerate(tokens.items())]}


def test_the_registered_matrix_estimate():
    """34,446,994 forward tokens at the full envelope: 2.392 h at 4,000 tokens/s, 6.38 h at 1,500."""
    policies = stage_a_policies(load_config("smoke"))
    fast, slow = estimate(_manifest(), policies, 4000.0), estimate(_manifest(), policies, 1500.0)
    assert fast["forward_tokens"] == sum(TOKENS.values()) == 34_446_994
    assert fast["device_hours"] == pytest.approx(34_446_994 / 4000 / 3600)
    assert slow["device_hours"] == pytest.approx(6.3791, abs=1e-4)
    assert slow["per_policy"]["joint_potential-seed42"] == pytest.approx(7_620_122 / 1500 / 3600)


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

    from apsft_dagster.core.engines.lifetime import require_device
    from apsft_dagster.core.base_model import base_model_path
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
