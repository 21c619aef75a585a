"""Orchestration overhead of `apsft run`: its wall time against the sum of the Dagster steps'
own execution times (step start to step end, from the run's event log), in a fresh state folder.

Run: .venv/bin/python benchmarks/bench_orchestration.py   (uses the machine's embedded-model cache;
     target: overhead <= 15% of the wall time)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    state = Path(tempfile.mkdtemp(prefix="apsft-bench-"))
    env = {**os.environ, "APSFT_STATE_DIR": str(state)}
    env.setdefault("APSFT_MODEL_CACHE", str(Path(__file__).resolve().parents[1] / ".apsft" / "model_cache"))
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "run"], env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started

    from apsft_dagster.core.paths import store_instance

    os.environ["DAGSTER_HOME"] = str(store_instance(state / "store" / "smoke", state))  # the smoke store's instance
    import dagster as dg
    from dagster._core.events import DagsterEventType

    instance = dg.DagsterInstance.get()
    steps = 0.0
    for run in instance.get_runs():
        started_at = {}
        for entry in instance.all_logs(run.run_id):
            event = entry.dagster_event
            if event is None:
                continue
            if event.event_type == DagsterEventType.STEP_START:
                started_at[event.step_key] = entry.timestamp
            elif event.event_type in (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE):
                steps += entry.timestamp - started_at.pop(event.step_key)
    overhead = wall - steps
    print(f"apsft run: {wall:.1f} s wall; steps' own execution {steps:.1f} s over {len(instance.get_runs())} runs; "
          f"orchestration overhead {overhead:.1f} s = {overhead / wall:.1%} (target <= 15%)")


if __name__ == "__main__":
    main()
