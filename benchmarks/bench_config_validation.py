"""How fast a bad profile is refused: `apsft run --config bad.yaml` vs a bare interpreter start.

Run: .venv/bin/python benchmarks/bench_config_validation.py
Prints the median wall time of each (5 runs) and their ratio; the target is < 2 s absolute.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from apsft_dagster.core.paths import CONFIG_DIR


def _time(cmd: list[str], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw = yaml.safe_load((CONFIG_DIR / "smoke.yaml").read_text())
        raw["harvest"]["samples_per_task"] = "eight"
        bad = Path(tmp) / "bad.yaml"
        bad.write_text(yaml.safe_dump(raw))
        refuse = _time([sys.executable, "-m", "apsft_dagster.cli", "run", "--config", str(bad), "--store", f"{tmp}/s"])
        bare = _time([sys.executable, "-c", "pass"])
    print(f"refuse bad config: {refuse:.3f} s (median of 5)")
    print(f"bare interpreter:  {bare:.3f} s")
    print(f"ratio: {refuse / bare:.1f}x; target < 2 s: {'met' if refuse < 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
