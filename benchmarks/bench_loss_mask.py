"""Loss-mask census and build throughput against a bare parse of the same file (same JSON library).

Writes a planted synthetic file of `--mb` megabytes (default 1024) in `--shape seed` (rows the
size of the seed's export, 46 KB, 4.5% of them defective: dataset_seed.py) or `--shape dense` (the
smoke file's 800-byte rows, nearly all defective: a measure of per-row overhead), then times, best of
`--repeat`: a bare `json.loads` of every line (one process), `census` and `build` in one process
(output and flags to /dev/null-like sinks that still hash), and all three again over `--workers`
ranges of the file (core/loss_mask/parallel.py, what the assets run); reports MB/s, the ratios to
the one-process bare parse (target >= 0.5x) and to the bare parse with as many workers, and the
peak RSS of each (they stream: RSS must not grow with the file).
Usage: python benchmarks/bench_loss_mask.py [--shape seed|dense] [--mb 1024] [--repeat 3] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from apsft_dagster.core.loss_mask.dataset import planted_rows
from apsft_dagster.core.loss_mask.dataset_seed import seed_shaped_rows

STEP = """
import io, json, sys, time, resource
from pathlib import Path
from apsft_dagster.core.loss_mask.build import build
from apsft_dagster.core.loss_mask.census import census
from apsft_dagster.core.loss_mask.parallel import build_file, census_file, line_ranges, lines_in
from multiprocessing import get_context
kind, path, expected, workers = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
def parse_range(span):
    return sum(1 for line in lines_in(path, *span) if json.loads(line))
class Sink(io.RawIOBase):
    def writable(self): return True
    def write(self, b): return len(b)
start = time.perf_counter()
with open(path, "rb", buffering=1 << 20) as f:  # every step reads through the same 1 MiB buffer
    if kind == "parse":
        n = sum(1 for line in f if json.loads(line))
        out = {"rows": n}
    elif kind == "census":
        out = census(f)["total"]
    elif kind == "build":
        out = build(f, Sink(), Sink(), expected_reasons=expected)
    elif kind == "parse_workers":  # the same ranges as the workers below, parsed and nothing else
        with get_context("fork").Pool(workers) as pool:
            out = {"rows": sum(pool.map(parse_range, [(a, b) for a, b, _ in line_ranges(Path(path), workers)]))}
    elif kind == "census_workers":
        out = census_file(path, workers=workers)["total"]
    else:
        out = build_file(path, Sink(), Sink(), expected_reasons=expected, workers=workers)
rss = max(resource.getrusage(r).ru_maxrss for r in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
print(json.dumps({"seconds": time.perf_counter() - start, "peak_rss_mb": rss / 1024,
                  "reasons": out.get("reasons", {})}))
"""


def write_file(path: Path, mb: int, shape: str) -> int:
    target, rows = mb * 1024 * 1024, 0
    planted = seed_shaped_rows if shape == "seed" else planted_rows
    with open(path, "wb") as f:
        for row, _ in planted(10**9, seed=2026):
            f.write(json.dumps(row).encode() + b"\n")
            rows += 1
            if f.tell() >= target:
                return rows
    return rows


def measure(kind: str, path: Path, expected: dict, workers: int = 1) -> dict:
    """One measurement in a fresh interpreter, so peak RSS is that step's own (its largest process)."""
    proc = subprocess.run([sys.executable, "-c", STEP, kind, str(path), json.dumps(expected), str(workers)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def best_of(steps: dict, repeat: int) -> dict:
    """Each step's fastest of `repeat` rounds; the rounds interleave the steps, so a slow spell of
    the machine lands on every step alike instead of on whichever ran during it."""
    best: dict[str, dict] = {}
    for _ in range(repeat):
        for name, step in steps.items():
            result = step()
            if name not in best or result["seconds"] < best[name]["seconds"]:
                best[name] = result
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("seed", "dense"), default="seed")
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes for the census and build over ranges of the file (default: every core)")
    args = parser.parse_args()
    path = Path(args.dir) / f"apsft-loss-mask-{args.shape}-{args.mb}mb.jsonl"
    started = time.perf_counter()
    rows = write_file(path, args.mb, args.shape) if not path.exists() else sum(1 for _ in open(path, "rb"))
    size = path.stat().st_size / 1024 / 1024
    print(f"file {path} ({args.shape} shape): {size:.0f} MB, {rows:,} rows "
          f"(ready in {time.perf_counter() - started:.0f} s)")
    reasons = measure("census", path, {})["reasons"]  # what the builds must mask
    w = args.workers
    best = best_of({"parse": lambda: measure("parse", path, {}),
                    "census": lambda: measure("census", path, {}),
                    "build": lambda: measure("build", path, reasons),
                    "parse_w": lambda: measure("parse_workers", path, {}, w),
                    "census_w": lambda: measure("census_workers", path, {}, w),
                    "build_w": lambda: measure("build_workers", path, reasons, w)}, args.repeat)
    parse, counted, built, parse_w, census_w, build_w = (best[k] for k in ("parse", "census", "build", "parse_w",
                                                                           "census_w", "build_w"))
    assert census_w["reasons"] == counted["reasons"] == built["reasons"] == build_w["reasons"]
    label = f"{w} workers"
    print(f"best of {args.repeat} interleaved rounds")
    for name, r, same in (("bare parse", parse, parse), ("census", counted, parse), ("build", built, parse),
                          (f"bare parse, {label}", parse_w, parse_w), (f"census, {label}", census_w, parse_w),
                          (f"build, {label}", build_w, parse_w)):
        print(f"{name:<22} {size / r['seconds']:7.1f} MB/s  {parse['seconds'] / r['seconds']:5.2f}x bare  "
              f"{same['seconds'] / r['seconds']:5.2f}x bare with as many workers  peak RSS {r['peak_rss_mb']:6.0f} MB")
    os.environ.get("APSFT_KEEP_BENCH_FILE") or path.unlink()


if __name__ == "__main__":
    main()
