"""README command 1's run (`apsft run`, smoke profile) quiet, then beside a process that keeps one
core busy the whole time: each stage's seconds under both, and the ratio (target: at most 1.5x).

Both runs start from empty stores and state folders; the embedded model comes from one shared
cache warmed first (so the build is measured once, quietly, and both runs time the same stages),
or is built by both runs with --build. The busy process is a plain Python spin loop, started
before the run and killed after it. The outputs of both runs are compared too: pinned threads and
kernels must give the same bytes however busy the machine was.

--one-core adds a quiet run with the second core's helper off (`APSFT_SECOND_CORE=off`,
workers/local.py): what the helper saves, and that its bytes are the same. --built adds a
quiet run that builds its model (`APSFT_MODEL_CACHE=off`): the shipped model's receipts against a
model built from scratch. Every run's receipts are compared with the first's.

Run: .venv/bin/python benchmarks/bench_contention.py [--build] [--one-core] [--built] [--dir /tmp/apsft-contention]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

STAGE_LINE = re.compile(r"^\s*(?:\[\d+/\d+\]\s*)?(?P<job>\w+_job)\b.*?(?P<seconds>\d+(?:\.\d+)?)\s*s\b")


def run(root: Path, name: str, cache: str, busy: bool, second_core: str = "on") -> tuple[float, dict[str, float], str]:
    state, store = root / name / "state", root / name / "store"
    shutil.rmtree(root / name, ignore_errors=True)
    env = {**os.environ, "APSFT_STATE_DIR": str(state), "APSFT_MODEL_CACHE": cache, "PYTHONUNBUFFERED": "1",
           "APSFT_SECOND_CORE": second_core}
    for var in ("APSFT_CONFIG", "APSFT_PROFILE", "APSFT_STORE_DIR", "DAGSTER_HOME"):
        env.pop(var, None)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "run", "--store", str(store)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wall = time.perf_counter() - started
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    (root / f"{name}.log").write_text(proc.stdout)
    if proc.returncode != 0:
        sys.exit(f"{name} run failed (exit {proc.returncode}); see {root / f'{name}.log'}")
    stages = {m["job"]: float(m["seconds"]) for m in map(STAGE_LINE.match, proc.stdout.splitlines()) if m}
    receipts = sorted(store.rglob("*.receipt.json")) or sorted(store.rglob("*receipt*"))
    digest = json.dumps({str(p.relative_to(store)): p.read_text() for p in receipts}, sort_keys=True)
    return wall, stages, (len(receipts), digest)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/apsft-contention")
    parser.add_argument("--build", action="store_true", help="both runs build the embedded model (cache off)")
    parser.add_argument("--one-core", action="store_true", help="and a quiet run with APSFT_SECOND_CORE=off")
    parser.add_argument("--built", action="store_true", help="and a quiet run with APSFT_MODEL_CACHE=off")
    args = parser.parse_args()
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    cache = "off" if args.build else str(root / "model_cache")
    if not args.build:
        print("warming the model cache (quiet) ...", flush=True)
        run(root, "warm", cache, busy=False)
    quiet_wall, quiet, quiet_digest = run(root, "quiet", cache, busy=False)
    busy_wall, busy, busy_digest = run(root, "busy", cache, busy=True)
    print(f"{'stage':32} {'quiet s':>9} {'busy s':>9} {'ratio':>7}")
    for job in quiet:
        if job in busy:
            print(f"{job:32} {quiet[job]:9.1f} {busy[job]:9.1f} {busy[job] / max(quiet[job], 1e-9):7.2f}x")
    print(f"{'apsft run (wall)':32} {quiet_wall:9.1f} {busy_wall:9.1f} {busy_wall / quiet_wall:7.2f}x"
          "  (target <= 1.5x)")
    print(f"artifacts byte-identical quiet vs busy: {quiet_digest == busy_digest} "
          f"({quiet_digest[0]} receipts compared)")
    same = quiet_digest == busy_digest
    extra = ((args.one_core, "one_core", cache, "off"), (args.built, "built", "off", "on"))
    for flag, name, run_cache, helper in extra:
        if flag:
            wall, stages, digest = run(root, name, run_cache, busy=False, second_core=helper)
            print(f"{name}: apsft run {wall:.1f} s ({wall / quiet_wall:.2f}x the quiet run); "
                  + ", ".join(f"{job} {stages[job]:.1f} s" for job in stages if stages[job] >= 5)
                  + f"; receipts byte-identical to the quiet run's: {digest == quiet_digest}")
            same &= digest == quiet_digest
    return 0 if busy_wall / quiet_wall <= 1.5 and same else 1


if __name__ == "__main__":
    sys.exit(main())
