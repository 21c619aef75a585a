"""Each stage's wall time on N devices (`apsft plan --devices N`, docs/experiment.md "The plan").

An engine stage's partitions are independent (a task's shard, a policy's adapter, merge or
generations), so a pool of engine workers, one per device, each taking partitions until none are
left, runs them side by side. The plan prices that as the greedy longest-first assignment of the
partitions to min(N, partitions) workers (Graham's LPT, within 4/3 of the best assignment), floored
by the longest partition, plus the model loads: one per worker, which loads its model once, or one
per partition where each partition loads its own model (a policy's merged model, an instrument).
A stage's partitions are priced by their relative sizes where the plan knows them (the arms'
forward tokens, Stage B's tasks per policy), else its device-hours are split evenly. A stage with
one partition and no engine (the embedded build on CPU) runs on one worker: wall = device-hours.

Stages run one after another, so a path's wall time is the sum of its stages'. Its device-hours
busy are the work plus every load; an N-device machine is held for N x wall.
"""

from __future__ import annotations

import heapq

from apsft_dagster.core.plan_settings import plan_settings

DEVICE_COUNTS = (1, 2, 4, 8)  # Stage A's total is shown on each
TOTALS = {"total_Stage_A_path": False, "total_with_Stage_B": True}  # total row key: Stage B's rows in it


def wall_hours(partition_hours: list[float], devices: int, load_hours: float = 0.0) -> float:
    """The makespan of `partition_hours` on `devices` workers, each taking the longest partition left
    whenever it is free (so no partition waits while a worker idles), never under the longest
    partition; plus one `load_hours` (the workers load side by side, each once). No partitions: 0."""
    if devices < 1:
        raise ValueError(f"devices {devices}: a wall time needs at least one worker")
    if not partition_hours:
        return 0.0
    finish = [0.0] * min(devices, len(partition_hours))  # a heap of the workers' finishing times
    for hours in sorted(partition_hours, reverse=True):
        heapq.heapreplace(finish, finish[0] + hours)
    return max(max(finish), max(partition_hours)) + load_hours


def load_hours(config) -> tuple[float, float] | None:
    """One model load (low, high) in hours, from the profile's `plan.model_load_seconds`; None: unpriced."""
    load = plan_settings(config).model_load_seconds
    return None if load is None else (load.low / 3600, load.high / 3600)


def _split(row: dict, hours: float) -> list[float]:
    """The stage's hours over its partitions, by their relative sizes (evenly where none is known)."""
    shares = row["partitions"]
    total = sum(shares)
    return [hours * s / total for s in shares] if total else [hours / len(shares)] * len(shares)


def _priced(row: dict, devices: int, hours: float, load: float) -> tuple[float, float]:
    """(wall, device-hours busy) of one end of the row's range."""
    parts = _split(row, hours)
    if not parts:
        return 0.0, 0.0
    if row["loads"] == "partition":
        parts, loads = [p + load for p in parts], len(parts) * load
        return wall_hours(parts, devices), hours + loads
    if row["loads"] == "worker":
        return wall_hours(parts, devices, load), hours + min(devices, len(parts)) * load
    return hours, hours  # no engine: one worker, nothing to load


def stage_wall(row: dict, devices: int, load: tuple[float, float] | None) -> dict | None:
    """The stage row's wall hours and device-hours busy on `devices`, low and high; None: not priced."""
    if row["hours_low"] is None:
        return None
    load = load or (0.0, 0.0)
    (wall_low, busy_low), (wall_high, busy_high) = (_priced(row, devices, row[key], one) for key, one in
                                                    (("hours_low", load[0]), ("hours_high", load[1])))
    return {"wall_low": wall_low, "wall_high": wall_high, "busy_low": busy_low, "busy_high": busy_high}


def _sum(walls: list[dict | None], devices: int) -> dict:
    priced = [w for w in walls if w is not None]
    return {"devices": devices, **{k: sum(w[k] for w in priced) for k in ("wall_low", "wall_high", "busy_low",
                                                                           "busy_high")}}


def add_walls(rows: list[dict], devices: int, load: tuple[float, float] | None) -> None:
    """Sets `wall_low`/`wall_high` on every stage row (None: not priced) and on the two total rows that
    sum whole stages (the Stage A path, with Stage B); None on the others."""
    walls = {id(r): stage_wall(r, devices, load) for r in rows if r["kind"] == "stage"}
    for row in rows:
        wall = walls.get(id(row))
        if row["key"] in TOTALS:
            wall = _sum([walls[id(r)] for r in rows if r["kind"] == "stage" and
                         (TOTALS[row["key"]] or not r["conditional"])], devices)
        row["wall_low"], row["wall_high"] = (wall["wall_low"], wall["wall_high"]) if wall else (None, None)


def stage_a_by_devices(rows: list[dict], load: tuple[float, float] | None,
                       counts: tuple[int, ...] = DEVICE_COUNTS) -> list[dict]:
    """The Stage A path's total on each device count: {devices, wall_low, wall_high, busy_low, busy_high}."""
    path = [r for r in rows if r["kind"] == "stage" and not r["conditional"]]
    return [_sum([stage_wall(r, n, load) for r in path], n) for n in counts]
