"""`apsft plan --devices N`: the wall-time arithmetic (core/plan/wall.py) against a brute-force makespan
over every assignment and hand-made cases, each stage's wall hours on the `full` profile computed here by
hand from its partitions, and the command's flag (its default from `ray.devices`, its refusal of 0)."""

import itertools
import math
import random

import pytest

from apsft_dagster.cli import main
from apsft_dagster.core.config import load_config
from apsft_dagster.core.plan import plan, registered
from apsft_dagster.core.plan.wall import add_walls, load_hours, stage_a_by_devices, wall_hours
from conftest import variant_config

LOAD = 0.25


def best_makespan(hours: list[float], devices: int) -> float:
    """The shortest makespan over every assignment of the partitions to the devices."""
    best = math.inf
    for owner in itertools.product(range(devices), repeat=len(hours)):
        finish = [0.0] * devices
        for h, d in zip(hours, owner):
            finish[d] += h
        best = min(best, max(finish))
    return best


@pytest.mark.parametrize("hours, devices, expected", [
    ([1.0, 2.0, 3.0, 4.0], 1, 10.0 + LOAD),  # one device: every partition in turn, one load
    ([1.0, 2.0, 3.0, 4.0], 4, 4.0 + LOAD),  # a device each: the longest, one load
    ([1.0, 2.0, 3.0, 4.0], 8, 4.0 + LOAD),  # more devices than partitions: the same
    ([5.0, 1.0, 1.0], 2, 5.0 + LOAD),  # the longest partition is the floor
    ([3.0, 3.0, 2.0, 2.0, 2.0], 2, 7.0 + LOAD),  # longest-first: 3+2+2 | 3+2 (the best is 6: 3+3 | 2+2+2)
    ([2.0] * 7, 3, 6.0 + LOAD),  # even partitions: ceil(7 / 3) rounds of 2
    ([], 4, 0.0),  # nothing to run: no load either
])
def test_hand_made_wall_times(hours, devices, expected):
    assert wall_hours(hours, devices, LOAD) == pytest.approx(expected)


def test_longest_first_is_within_grahams_bound_of_the_best_assignment():
    rng = random.Random(59)
    for _ in range(200):
        hours = [rng.choice([0.5, 1.0, 1.5, 2.0, 3.0, 5.0]) * rng.random() for _ in range(rng.randint(1, 7))]
        devices = rng.randint(1, 4)
        best, wall = best_makespan(hours, devices), wall_hours(hours, devices)
        assert best - 1e-12 <= wall <= (4 / 3 - 1 / (3 * devices)) * best + 1e-12, (hours, devices)
        assert wall >= max(hours) and wall >= sum(hours) / devices - 1e-12
        if devices == 1 or devices >= len(hours):
            assert wall == pytest.approx(best)


def test_no_worker_is_refused():
    with pytest.raises(ValueError, match="devices 0"):
        wall_hours([1.0], 0)


@pytest.fixture
def full(monkeypatch, tmp_path):
    monkeypatch.setenv("APSFT_MODEL_DIR", str(tmp_path / "no-snapshot-here"))
    config = load_config("full", require_snapshot=False)
    return config, plan(config), load_hours(config)


def test_each_full_stage_spreads_its_partitions_over_8_devices(full):
    config, rows, (load_low, load_high) = full
    assert (load_low, load_high) == (20 / 3600, 120 / 3600)  # configs/full.yaml plan.model_load_seconds
    add_walls(rows, 8, (load_low, load_high))
    by = {r["key"]: r for r in rows}
    h = by["harvest"]  # 360 tasks on 8 workers: 45 each, one load each
    assert h["wall_low"] == pytest.approx(45 * h["hours_low"] / 360 + load_low)
    t = by["training"]  # six adapters, one a device: the largest arm's share, one load
    share = max(registered.FORWARD_TOKENS.values()) / registered.MATRIX_FORWARD_TOKENS
    assert t["wall_high"] == pytest.approx(share * t["hours_high"] + load_high)
    e = by["stage_a_evaluation"]  # seven policies, each loads its own model
    assert e["wall_low"] == pytest.approx(e["hours_low"] / 7 + load_low)
    p = by["parity_gate"]  # two instruments, one model each
    assert p["wall_high"] == pytest.approx(p["hours_high"] / 2 + load_high)
    stages = [r for r in rows if r["kind"] == "stage"]
    path = [r for r in stages if not r["conditional"]]
    assert by["total_Stage_A_path"]["wall_low"] == pytest.approx(sum(r["wall_low"] for r in path))
    assert by["total_with_Stage_B"]["wall_high"] == pytest.approx(sum(r["wall_high"] for r in stages))
    assert by["registered_matrix"]["wall_low"] is None


def test_stage_b_generations_are_priced_per_policy_by_its_tasks(full):
    config, rows, _ = full
    g = next(r for r in rows if r["key"] == "stage_b_generations")
    assert sum(g["partitions"]) * config.evaluation.allowance == g["tokens_upper"]
    assert len(g["partitions"]) == 7 + 2  # base and the six Stage A policies, the replication pair


def test_stage_a_on_one_device_is_its_device_hours_plus_every_load(full):
    config, rows, load = full
    path = [r for r in rows if r["kind"] == "stage" and not r["conditional"]]
    # a load per worker: harvest, scoring, R1, training; per partition: 2 instruments, 6 merges, 7 evaluations
    loads = 4 + 2 + 6 + 7
    totals = stage_a_by_devices(rows, load)
    assert [t["devices"] for t in totals] == [1, 2, 4, 8]
    one = totals[0]
    assert one["wall_low"] == pytest.approx(sum(r["hours_low"] for r in path) + loads * load[0])
    assert one["busy_high"] == pytest.approx(one["wall_high"])
    walls = [t["wall_high"] for t in totals]
    assert walls == sorted(walls, reverse=True) and walls[-1] < walls[0] / 4
    # busy device-hours grow only by the extra workers' loads
    assert totals[-1]["busy_low"] > one["busy_low"] and totals[-1]["busy_low"] < one["busy_low"] + 8 * 4 * load[0]


def test_the_command_prints_wall_hours_per_stage_and_stage_a_by_devices(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("APSFT_MODEL_DIR", str(tmp_path / "absent"))
    assert main(["plan", "--profile", "full", "--devices", "8", "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "wall hours, 8 devices" in out and "(360 tasks)" in out and "(6 policies)" in out
    block = out.split("Stage A path by devices")[1].splitlines()
    assert [line.split()[0] for line in block[3:7]] == ["1", "2", "4", "8"]
    assert "model load: 20-120 s (profile plan.model_load_seconds)" in out
    assert main(["plan", "--profile", "full", "--store", str(tmp_path / "store")]) == 0
    assert "wall hours" not in capsys.readouterr().out  # no --devices, no ray.devices: as before


def test_the_profiles_ray_devices_is_the_default_and_a_missing_load_is_said(capsys, tmp_path):
    def edit(raw):
        raw["ray"] = {"devices": 4}
        raw["plan"].pop("model_load_seconds")
    path = variant_config(tmp_path, edit)
    assert main(["plan", "--config", str(path), "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "wall hours, 4 devices" in out and "model load: not priced" in out


@pytest.mark.parametrize("n", ["0", "-2"])
def test_devices_below_one_is_refused_naming_the_flag(capsys, tmp_path, n):
    assert main(["plan", "--profile", "smoke", "--devices", n, "--store", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert f"--devices {n}" in err and "1 or more" in err and not (tmp_path / "store").exists()
