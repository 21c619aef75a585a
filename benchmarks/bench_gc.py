"""What Python's collector costs an `apsft run`, with `freeze_loaded` (APSFT_GC_FREEZE unset) and
without it (APSFT_GC_FREEZE=off), in alternating fresh processes on the same store.

Each process runs `apsft run` under a `gc.callbacks` timer: seconds inside collections, full
(generation 2) collections, wall. The store is the smoke profile's; the first process of a fresh
store runs the whole experiment, so pass `--store` of a finished store (a rerun: every stage
verifies and keeps its receipts) or an empty one with `--fresh` (each process starts from an empty
copy: the whole run). The receipts are the same either way; the collector never changes a value.

Run: .venv/bin/python benchmarks/bench_gc.py [--store DIR] [--fresh] [--rounds 2]
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
TIMED = """
import atexit, gc, json, sys, time
seen = {"seconds": 0.0, "full": 0, "full_seconds": 0.0}
def timer(phase, info, started=[0.0]):
    if phase == "start":
        started[0] = time.perf_counter()
        return
    spent = time.perf_counter() - started[0]
    seen["seconds"] += spent
    if info["generation"] == 2:
        seen["full"] += 1
        seen["full_seconds"] += spent
gc.callbacks.append(timer)
atexit.register(lambda: print("GC " + json.dumps(seen), file=sys.stderr))
from apsft_dagster.cli import main
code = main(sys.argv[1:])
sys.stdout.flush()
sys.exit(code)
"""


def one(store: Path, frozen: bool, state: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APSFT_", "DAGSTER"))}
    env.update(APSFT_STATE_DIR=str(state), **({} if frozen else {"APSFT_GC_FREEZE": "off"}))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", TIMED, "run", "--store", str(store)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"apsft run failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    line = next(x for x in proc.stderr.splitlines() if x.startswith("GC "))
    return {"frozen": frozen, "wall_s": round(wall, 1), **{k: round(v, 2) for k, v in json.loads(line[3:]).items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", type=Path, default=ROOT / ".apsft" / "store" / "smoke")
    p.add_argument("--fresh", action="store_true", help="each process starts from an empty store")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-gc-") as tmp:
        for r in range(args.rounds):
            for frozen in (False, True):  # alternating: the machine's drift falls on both
                store = Path(tmp) / f"store-{r}-{frozen}" if args.fresh else args.store
                row = one(store, frozen, Path(tmp) / f"state-{r}-{frozen}")
                rows.append(row)
                print(f"{'frozen' if frozen else 'off   '}  wall {row['wall_s']:6.1f} s  collector "
                      f"{row['seconds']:5.2f} s  full collections {row['full']:3d} ({row['full_seconds']:.2f} s)")
                if args.fresh:
                    shutil.rmtree(store, ignore_errors=True)
    for frozen in (False, True):
        mine = [r for r in rows if r["frozen"] == frozen]
        print(f"{'frozen' if frozen else 'off'}: collector {sum(r['seconds'] for r in mine) / len(mine):.2f} s, "
              f"wall {sum(r['wall_s'] for r in mine) / len(mine):.1f} s (mean of {len(mine)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
