"""The laptop profile's harvest on a local Ray cluster of 2 CPUs: 1 worker against 2 workers, in one
run (issue 59's acceptance point: 2 workers at least 1.7x faster on this 2-core machine).

The slice: the `laptop` profile unchanged (its shipped embedded model, its sampling, 64 traces a task,
the 384-token allowance and 128-token continuation), harvested for the first `--per-cell` train tasks
(default 8) of each of its 9 family x level cells: 72 of its 360 tasks, `<family>-L<level>-000` to
`-007`. A task takes about 1.5-4 s on one thread here, so the slice is many small partitions, handed
out one at a time, which keeps the two workers within about one task of each other.

Steps, one process: a fresh store (`apsft run --profile laptop --to tasks_and_model_job`, the state
folder a temp one; refused if the package ships no model for the profile: no 15-minute build),
`benchmarks/bench_calibrate.py` (subprocess), a local cluster (`ray.init(num_cpus=2)`), the slice on
1 worker (`RayShare`, workers/ray_pool.py), its shards and keys removed, the slice on 2 workers, the
two runs' bytes compared (any difference fails the run), one worker's start-to-ready time (the
interpreter, torch and the model, as each run pays it), the calibration again. Each wall runs from
the pool's start (its workers' model load included) to the last partition's result. Beside each wall:
the machine's busy core-seconds and Ray's own daemons' share of them. Exits 1 below 1.7x.

Run: flock /tmp/apsft-heavy.lock .venv/bin/python benchmarks/bench_workers.py [--per-cell 8] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = 1.7
CELLS = [(family, level) for family in ("caravan", "foundry_ledger", "runeward") for level in (1, 2, 3)]
DAEMONS = ("raylet", "gcs_server", "dashboard", "log_monitor", "monitor.py", "runtime_env", "ray_client")


def calibrate() -> float:
    """bench_calibrate.py's median, in seconds (a fresh interpreter, one thread)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_calibrate.py")], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench_calibrate failed:\n{proc.stderr[-2000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("calibration:"))
    print(line, flush=True)
    return float(line.split()[1])


def prepare(store: Path) -> None:
    """The laptop profile's stages before the harvest, in `store` (the shipped model, no build)."""
    from apsft_dagster.core.config import load_config
    from apsft_dagster.core.embedded.cache import profile_key
    from apsft_dagster.core.embedded.shipped import shipped_entry

    if shipped_entry(profile_key(load_config("laptop"))) is None:
        raise SystemExit("bench_workers: the package ships no laptop model for this code; building one takes "
                         "~15 min (scripts/refresh_model_seed.py ships it)")
    started = time.perf_counter()
    proc = subprocess.run([str(Path(sys.executable).with_name("apsft")), "run", "--profile", "laptop",
                           "--to", "tasks_and_model_job", "--store", str(store)], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0 or "no build" not in proc.stdout + proc.stderr:
        raise SystemExit(f"bench_workers: preparing the store failed or built a model:\n{proc.stdout[-3000:]}"
                         f"{proc.stderr[-3000:]}")
    print(f"store prepared in {time.perf_counter() - started:.1f} s (the shipped model, no build): {store}")


def slice_tasks(per_cell: int) -> list[str]:
    from apsft_dagster.core.config import load_config
    from apsft_dagster.core.tasks.catalog import train_task_ids

    train = set(train_task_ids(load_config("laptop")))
    tasks = [f"{family}-L{level}-{i:03d}" for i in range(per_cell) for family, level in CELLS]
    if missing := [t for t in tasks if t not in train]:
        raise SystemExit(f"bench_workers: --per-cell {per_cell} asks for tasks the laptop has not: {missing[:3]}")
    return tasks


def cpu_seconds() -> tuple[float, float]:
    """(the machine's busy core-seconds so far, Ray's daemons' core-seconds so far)."""
    import psutil

    times = psutil.cpu_times()
    busy = sum(times) - times.idle - getattr(times, "iowait", 0.0)
    daemons = 0.0
    for proc in psutil.process_iter(["name", "cmdline", "cpu_times"]):
        line = " ".join(proc.info["cmdline"] or [proc.info["name"] or ""])
        if proc.info["cpu_times"] and any(d in line for d in DAEMONS) and "ray" in line:
            daemons += proc.info["cpu_times"].user + proc.info["cpu_times"].system
    return busy, daemons


def harvest(experiment, tasks: list[str], devices: int) -> dict:
    """The slice on `devices` workers of the running cluster: wall from the pool's start to the last result."""
    import ray

    from apsft_dagster.experiment.assets.trace_bank import harvest_worker
    from apsft_dagster.workers.cluster import Target
    from apsft_dagster.workers.ray_pool import RayShare

    busy0, daemons0 = cpu_seconds()
    started = time.perf_counter()
    share = RayShare("trace_bank", harvest_worker, experiment, None, Target(None, devices)).expect(tasks).open()
    actions = [share.result(task)["action"] for task in tasks]
    wall = time.perf_counter() - started
    busy1, daemons1 = cpu_seconds()
    if set(actions) != {"generated"}:
        raise SystemExit(f"bench_workers: expected every task generated on {devices} workers, got {set(actions)}")
    share.close()
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    per_worker: dict[str, int] = {}
    for task in tasks:
        per_worker[share.placed(task)["worker"]] = per_worker.get(share.placed(task)["worker"], 0) + 1
    figures = {"devices": devices, "wall_s": round(wall, 2), "busy_core_s": round(busy1 - busy0, 1),
               "ray_daemons_core_s": round(daemons1 - daemons0, 1), "tasks_per_worker": sorted(per_worker.values())}
    print(f"{devices} worker(s): {figures}", flush=True)
    return figures


def bank_bytes(store, tasks: list[str]) -> dict[str, bytes]:
    from apsft_dagster.core.layout import TRACE_BANK, key_file, shard_file

    return {name: store.path(name).read_bytes() for t in tasks for name in (shard_file(TRACE_BANK, t),
                                                                             key_file(TRACE_BANK, t))}


def worker_start_s(experiment) -> float:
    """One engine worker's start to ready: its interpreter, imports and model load (what each run pays)."""
    import ray

    from apsft_dagster.workers.cluster import worker_options
    from apsft_dagster.workers.ray_pool import PASSED
    from apsft_dagster.workers.ray_worker import EngineWorker

    fields = {f: getattr(experiment, f) for f in ("profile", "config_path", "store_dir", "definitions_digest")}
    env = {k: v for k, v in os.environ.items() if k.startswith(PASSED)}
    started = time.perf_counter()
    worker = ray.remote(**worker_options(experiment.config()))(EngineWorker).remote(
        "apsft_dagster.experiment.assets.trace_bank:harvest_worker", fields, {}, env)
    ray.get(worker.ready.remote())
    seconds = time.perf_counter() - started
    ray.kill(worker)
    return round(seconds, 2)


def measure(store_dir: Path, tasks: list[str]) -> dict:
    """Both runs on one local cluster of 2 CPUs, their bytes compared, and one worker's start time."""
    import ray

    from apsft_dagster.resources import ExperimentResource

    experiment = ExperimentResource(profile="laptop", store_dir=str(store_dir))
    store = experiment.store()
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 << 20, log_to_driver=False)
    try:
        one = harvest(experiment, tasks, 1)
        made = bank_bytes(store, tasks)
        for name in made:
            store.remove(name)
        two = harvest(experiment, tasks, 2)
        again = bank_bytes(store, tasks)
        if differ := sorted(name for name in made if again[name] != made[name]):
            raise SystemExit(f"bench_workers: FAIL: {len(differ)} of {len(made)} files differ between 1 and 2 "
                             f"workers, e.g. {differ[:4]}")
        print(f"bytes: the {len(made)} shards and keys of 1 and 2 workers are identical", flush=True)
        start = worker_start_s(experiment)
    finally:
        ray.shutdown()
    return {"one": one, "two": two, "files_identical": len(made), "worker_start_s": start}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-cell", type=int, default=8, help="train tasks of each family x level cell (max 40)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench_workers-"))
    os.environ["APSFT_STATE_DIR"] = str(tmp / "state")
    tasks = slice_tasks(args.per_cell)
    try:
        prepare(tmp / "store")
        before = calibrate()
        figures = measure(tmp / "store", tasks)
        after = calibrate()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    speedup = figures["one"]["wall_s"] / figures["two"]["wall_s"]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    result = {"commit": commit, "tasks": len(tasks), "calibration_s": [before, after], **figures,
              "speedup": round(speedup, 2), "target": TARGET}
    print(f"harvest of {len(tasks)} laptop tasks: 1 worker {figures['one']['wall_s']:.1f} s, 2 workers "
          f"{figures['two']['wall_s']:.1f} s: {speedup:.2f}x (target >= {TARGET}x); one worker's start "
          f"{figures['worker_start_s']:.1f} s; calibration {before:.2f} s / {after:.2f} s; HEAD {commit}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0 if speedup >= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
