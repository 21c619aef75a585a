"""Loss-mask pack throughput and peak memory on planted seed-shaped rows, beside census on the same file.

Writes (once; kept and reused at `--path`) a file of `--gb` gigabytes of seed-shaped rows
(core/loss_mask/dataset_seed.py: 46 KB a row, 4.5% defective), then, each in a fresh interpreter so its
peak RSS is its own: `census_file` (core/loss_mask/parallel.py) with `--workers` processes, and the
streaming pack (core/loss_mask/pack.py `pack_to_folder`) of the same file with the embedded model's
tokenizer (the shipped smoke entry's folder unless `--tokenizer DIR`) and the shipped template, with
`--workers` encoding processes, into a temporary folder. Prints MB/s of each and the peak RSS of the pack's
main process and of its largest worker (ru_maxrss): the pack streams, so RSS must not grow from 1 GB to 10 GB.
Usage: python benchmarks/bench_loss_mask_pack.py --gb 1 --path /tmp/apsft-pack-1gb.jsonl [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from apsft_dagster.core.embedded.shipped import SHIPPED
from apsft_dagster.core.loss_mask.dataset_seed import seed_shaped_rows

STEP = """
import json, resource, sys, tempfile, time
from pathlib import Path
kind, path, tokenizer_dir = sys.argv[1], sys.argv[2], sys.argv[4]
workers, pack_length = int(sys.argv[3]), int(sys.argv[5])
start = time.perf_counter()
if kind == "census":
    from apsft_dagster.core.loss_mask.parallel import census_file
    out = {"rows": census_file(path, workers=workers)["total"]["rows"]}
else:
    from transformers import AutoTokenizer
    from apsft_dagster.core.loss_mask.pack import pack_to_folder
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    start = time.perf_counter()
    with open(path, "rb", buffering=1 << 20) as lines, tempfile.TemporaryDirectory() as folder:
        report = pack_to_folder(lines, tokenizer, Path(folder), pack_length=pack_length, shards=2, seed=20260731,
                                window=1024, workers=workers)
        out = {k: report[k] for k in ("rows_in", "rows_packed", "packs", "tokens", "rows_over_limit",
                                      "rows_no_trainable", "efficiency")}
out["seconds"] = time.perf_counter() - start
out["main_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["worker_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps(out))
"""


def write_file(path: Path, gb: float) -> int:
    """Seed-shaped rows until the file holds `gb` GiB, streamed to disk (written to a temp name, then renamed)."""
    target, rows, tmp = int(gb * 1024 ** 3), 0, path.with_name(path.name + ".partial")
    with open(tmp, "wb", buffering=1 << 20) as f:
        for row, _ in seed_shaped_rows(10**9, seed=2026):
            f.write(json.dumps(row).encode() + b"\n")
            rows += 1
            if f.tell() >= target:
                break
    os.replace(tmp, path)
    return rows


def measure(kind: str, path: Path, workers: int, tokenizer: str, pack_length: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", STEP, kind, str(path), str(workers), tokenizer, str(pack_length)],
                          capture_output=True, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if proc.returncode:
        raise SystemExit(f"{kind} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--path", required=True, help="the planted file; written once, reused when present")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--pack-length", type=int, default=65536, help="the seed packed at 65,536")
    parser.add_argument("--tokenizer", default=str(sorted(SHIPPED.glob("*/tokenizer.json"))[0].parent))
    args = parser.parse_args()
    path = Path(args.path)
    started = time.perf_counter()
    rows = write_file(path, args.gb) if not path.exists() else None
    size = path.stat().st_size / 1024 / 1024
    print(f"file {path}: {size:,.0f} MB" + (f", {rows:,} rows written in {time.perf_counter() - started:.0f} s"
                                              if rows else " (reused)"))
    print(f"tokenizer {args.tokenizer}; pack_length {args.pack_length}; {args.workers} workers")
    census = measure("census", path, args.workers, args.tokenizer, args.pack_length)
    pack = measure("pack", path, args.workers, args.tokenizer, args.pack_length)
    print(f"census  {size / census['seconds']:7.2f} MB/s  {census['seconds']:8.1f} s  "
          f"peak RSS main {census['main_rss_mb']:5.0f} MB, largest worker {census['worker_rss_mb']:5.0f} MB")
    print(f"pack    {size / pack['seconds']:7.2f} MB/s  {pack['seconds']:8.1f} s  "
          f"peak RSS main {pack['main_rss_mb']:5.0f} MB, largest worker {pack['worker_rss_mb']:5.0f} MB")
    print("pack report: " + json.dumps({k: v for k, v in pack.items() if "rss" not in k and k != "seconds"}))


if __name__ == "__main__":
    main()
