"""Full-scale selection, audits and seal validation on a synthetic bank (docs/PROTOCOL.md §15).

Writes a synthetic `full`-profile store (360 train tasks x 64 traces, ~98.5% eligible, thought
lengths log-normal around 4,700 tokens, token ids and multi-line thoughts of that length,
score and R1 shards, indexes) under a temp folder, then times, best of 3:
  - loading the candidates from the shards, and `select_arms` on them (target <= 5 s);
  - every SQL audit in dbt_like_sql/ (target <= 1 s each), on the selection's provenance files;
  - `verify_seal` (what selection runs: every shard re-hashed) and `validate_bank` (the seal's
    full re-validation: hashes + Parquet decode + joins) against `sha256sum` over the same files,
    single process and `xargs -P <cores>` (target: verify <= 1.5x sha256sum).
Record lengths for the dose audit are thought tokens + 160 (no tokenizer at this scale).
Usage: .venv/bin/python benchmarks/bench_scale.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from apsft_dagster.core.audits import discover, run_audit
from apsft_dagster.core.bank import write_index
from apsft_dagster.core.config import load_config
from apsft_dagster.core.harvest import TRACE_SCHEMA
from apsft_dagster.core.layout import R1_BANK, SCORE_BANK, TRACE_BANK, arm_rows, shard_file
from apsft_dagster.core.rollouts import R1_SCHEMA
from apsft_dagster.core.score_bank import SCORE_COLUMNS, SCORE_SCHEMA
from apsft_dagster.core.seal import seal, validate_bank, verify_seal
from apsft_dagster.core.selection.arms import ARMS
from apsft_dagster.core.selection.rules import select_arms
from apsft_dagster.core.selection.sft_arms import load_candidates, manifest_entry, provenance
from apsft_dagster.core.store import Store
from apsft_dagster.core.tasks.catalog import train_task_ids

TRACES_PER_TASK = 64
LINES = [f"Step {i}: {w} {a} and {b} gives {a + b}." for i, (w, a, b) in
         enumerate(zip(np.random.default_rng(0).choice(["add", "take", "carry", "move", "count"], 4000),
                       range(4000), range(17, 4017)))]


def best_of(fn, n: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(n):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def synthetic_task(task_id: str, family: str, level: int, rng: np.random.Generator) -> dict[str, pl.DataFrame]:
    n_tokens = np.clip(rng.lognormal(np.log(4300), 0.45, TRACES_PER_TASK), 200, 24000).astype(np.int64)
    eligible = rng.random(TRACES_PER_TASK) > 0.015
    ids = [f"{task_id}/s{i:03d}" for i in range(TRACES_PER_TASK)]
    texts = ["\n".join(LINES[j] for j in rng.integers(0, len(LINES), max(1, n // 12))) + "\n" for n in n_tokens]
    tokens = [rng.integers(0, 151_000, n) for n in n_tokens]
    traces = pl.DataFrame({
        "trace_id": ids, "task_id": task_id, "family": family, "level": level, "batch": "main",
        "sample_index": np.arange(TRACES_PER_TASK), "seed": rng.integers(0, 2**31, TRACES_PER_TASK),
        "continuation_seed": None, "thought": texts, "token_ids": [t.tolist() for t in tokens],
        "n_tokens": n_tokens + 12, "n_thought_tokens": n_tokens, "n_record_tokens": n_tokens + 160,
        "closed": eligible, "continued": False, "loop": False, "loop_period": None, "eligible": eligible,
        "finish_reason": "stop", "token_sha256": "0" * 64, "task_excluded": False}, schema=TRACE_SCHEMA)
    scored = traces.filter("eligible").select("trace_id", "task_id", "family", "level", "n_thought_tokens")
    n = scored.height
    gains = rng.normal(0.0, 0.3, (n, len(SCORE_COLUMNS)))
    scores = scored.with_columns(n_answer_tokens=pl.lit(2, pl.Int64), n_joint_tokens=pl.lit(8, pl.Int64),
                                 **{c: gains[:, i] for i, c in enumerate(SCORE_COLUMNS)},
                                 instrument=pl.lit("reference")).select(SCORE_SCHEMA.keys()).cast(SCORE_SCHEMA)
    labels = scored.select("trace_id", "task_id", "family", "level").with_columns(
        seed=pl.lit(1, pl.Int64), rollout_text=pl.lit(" 7"), finish_reason=pl.lit("stop"), parsed_answer=pl.lit("7"),
        success=pl.Series(rng.random(n) < 0.2)).cast(R1_SCHEMA)
    return {TRACE_BANK: traces, SCORE_BANK: scores, R1_BANK: labels}


def build_store(root: Path, config) -> Store:
    store = Store(root)
    rng = np.random.default_rng(20261130)
    digests = {bank: {} for bank in (TRACE_BANK, SCORE_BANK, R1_BANK)}
    catalog = []
    for n, task_id in enumerate(train_task_ids(config)):
        family, level = task_id.rsplit("-", 2)[0], int(task_id.rsplit("-", 2)[1][1:])
        catalog.append({"task_id": task_id, "split": "train", "family": family, "level": level,
                        "prompt": f"task {task_id}", "answer": "7"})
        for bank, frame in synthetic_task(task_id, family, level, rng).items():
            digests[bank][task_id] = store.put_parquet(shard_file(bank, task_id), frame)
        if n % 60 == 59:
            print(f"  wrote {n + 1}/360 tasks", flush=True)
    for bank, d in digests.items():
        write_index(store, bank, d)
    store.put_parquet("task_catalog.parquet", pl.DataFrame(catalog))
    store.put_json("base_model.json", {"fingerprint": "f" * 64})
    store.put_json("parity_gate.json", {"metrics": {"answer_gain": 0.01, "joint_gain": 0.02}, "threshold": 0.15,
                                        "passed": True})
    return store


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", help="build the synthetic store here and keep it")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="apsft-scale-"))
    model_dir = root / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text("{}")
    os.environ["APSFT_MODEL_DIR"] = str(model_dir)  # `full` insists on a model directory; none is loaded
    config = load_config("full")
    start = time.perf_counter()
    store = (build_store(root / "store", config) if not (root / "store" / "evidence_seal.json").exists()
             else Store(root / "store"))
    print(f"synthetic store: {time.perf_counter() - start:.1f} s")

    task_ids = train_task_ids(config)
    load_s, candidates = best_of(lambda: load_candidates(store, task_ids))
    select_s, arms = best_of(lambda: select_arms(candidates, seed=42, top_k=12, band=0.25, per_cell=40))
    print(f"candidates: {candidates.height} traces, {candidates['eligible'].sum()} eligible, "
          f"{candidates['n_thought_tokens'].sum() / 1e6:.1f}M thought tokens; load {load_s:.2f} s")
    print(f"select_arms: {select_s:.2f} s for {sum(f.height for f in arms.values())} rows (target <= 5 s)")

    entries = []
    for arm in ARMS:
        rows = arms[arm].with_columns(n_record_tokens=pl.col("n_thought_tokens") + 160,
                                      n_forward_tokens=pl.col("n_thought_tokens") + 160, row=pl.int_range(pl.len()))
        store.put_parquet(arm_rows(arm), provenance(rows.with_columns(prompt=pl.lit(""), answer=pl.lit(""))))
        entries.append(manifest_entry(arm, rows, "0" * 64, config))
    store.put_json("sft_manifest.json", {"arms": entries})
    print(f"two-epoch forward tokens, all arms: {sum(e['forward_tokens'] for e in entries) / 1e6:.1f}M")
    for audit in discover():
        seconds, result = best_of(lambda a=audit: run_audit(a, store))
        print(f"audit {audit.name}: {seconds * 1000:.0f} ms, {result.height} rows (target <= 1 s)")

    seal(store, config)
    files = sorted(str(p) for bank in (TRACE_BANK, SCORE_BANK, R1_BANK)
                   for p in store.path(f"{bank}/shards").glob("*.parquet"))
    size = sum(os.path.getsize(f) for f in files)
    one, _ = best_of(lambda: subprocess.run(["sha256sum", *files], check=True, capture_output=True))
    cores = os.cpu_count() or 1
    many, _ = best_of(lambda: subprocess.run(["xargs", "-0", "-P", str(cores), "-n", "64", "sha256sum"],
                                             input="\0".join(files).encode(), check=True, capture_output=True))
    verify_s, _ = best_of(lambda: verify_seal(store, config))
    validate_s, (problems, _) = best_of(lambda: validate_bank(store, config))
    assert not problems, problems[:3]
    print(f"seal inputs: {len(files)} shards, {size / 2**20:.0f} MiB")
    print(f"sha256sum: {one:.2f} s single process, {many:.2f} s with xargs -P {cores}")
    print(f"verify_seal: {verify_s:.2f} s = {verify_s / one:.2f}x sha256sum ({verify_s / many:.2f}x parallel) "
          "(target <= 1.5x)")
    print(f"validate_bank (hashes + decode + joins): {validate_s:.2f} s = {validate_s / one:.2f}x sha256sum "
          f"({validate_s / many:.2f}x parallel)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
