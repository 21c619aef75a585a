"""Stage A evaluation and analysis benchmarks.

1. Batched greedy evaluation tokens/s vs one request at a time (same engine, prompts, allowance;
   target >= 2x on CPU), over batch sizes.
2. The whole Stage A analysis at full scale: 7 policies x 300 tasks, every bootstrap at 10,000
   resamples (the decision and each policy's interval; target <= 2 s).

Run: .venv/bin/python benchmarks/bench_evaluation.py [STORE_DIR] [--tasks N]
     (a smoke store with a base model and a task catalog; default .apsft/store/smoke)
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import polars as pl

from apsft_dagster.core.analysis import stage_a_decision
from apsft_dagster.core.config import load_config
from apsft_dagster.core.engines.base import GREEDY, GenerationRequest
from apsft_dagster.core.engines.transformers_engine import TransformersEngine
from apsft_dagster.core.evaluation.generations import eval_tasks
from apsft_dagster.core.evaluation.summary import policy_figures
from apsft_dagster.core.paths import store_root
from apsft_dagster.core.protocol import IM_END, THINK_CLOSE, format_prompt
from apsft_dagster.core.selection.arms import ARMS
from apsft_dagster.core.store import Store


def generation(store: Store, n_tasks: int, allowance: int) -> None:
    engine = TransformersEngine.load(str(store.path("base_model")), [THINK_CLOSE, IM_END])
    tok, end = engine.tokenizer, engine.tokenizer.convert_tokens_to_ids(IM_END)
    prompts = eval_tasks(store.get_parquet("task_catalog.parquet"))["prompt"].to_list()[:n_tasks]
    requests = [GenerationRequest(tuple(tok(format_prompt(p), add_special_tokens=False)["input_ids"]), 1, allowance, 0,
                                  stop_token_ids=(end,)) for p in prompts]
    started = time.perf_counter()
    single = [engine.generate([r], GREEDY)[0][0] for r in requests]
    single_s = time.perf_counter() - started
    tokens = sum(len(c.token_ids) for c in single)
    print(f"{len(requests)} eval prompts, allowance {allowance}, {tokens} completion tokens")
    print(f"  one at a time      : {tokens / single_s:8.1f} tokens/s ({single_s:.1f} s)")
    for size in (8, 16, 32, 64, 128):
        engine.batch_size = size
        started = time.perf_counter()
        batched = engine.generate(requests, GREEDY)
        seconds = time.perf_counter() - started
        same = sum(a.token_ids == b[0].token_ids for a, b in zip(single, batched))
        print(f"  batched, size {size:3d} : {tokens / seconds:8.1f} tokens/s = {single_s / seconds:.2f}x "
              f"(target >= 2x); identical to one at a time: {same}/{len(requests)}")


def analysis(n_resamples: int = 10_000) -> None:
    rng = np.random.default_rng(0)
    rows = []
    families = ("caravan", "foundry_ledger", "runeward")
    splits = [("core_iid", families[i % 3]) for i in range(180)] + [("core_hard", families[i % 3]) for i in range(60)] \
        + [("held_family", ("brinework", "spindle")[i % 2]) for i in range(60)]
    for k, arm in enumerate(("base", *ARMS)):
        p = 0.3 + 0.05 * k
        for i, (split, family) in enumerate(splits):
            rows.append({"policy": arm, "arm": arm, "task_id": f"t{i:03d}", "split": split, "family": family,
                         "correct": bool(rng.random() < p), "parsed": bool(rng.random() < 0.97),
                         "closed": True, "loop": False, "thought_tokens": int(rng.integers(50, 5000)),
                         "forward_tokens": int(rng.integers(100, 6000))})
    results = pl.DataFrame(rows)
    config = load_config("smoke")  # the thresholds are the same in both profiles
    started = time.perf_counter()
    stage_a_decision(results, n_resamples=n_resamples, seed=42, thresholds=config.stage_b)
    for policy in results["policy"].unique(maintain_order=True):
        policy_figures(results.filter(pl.col("policy") == policy), n_resamples=n_resamples, seed=42, confidence=0.95)
    seconds = time.perf_counter() - started
    print(f"Stage A analysis, 7 policies x 300 tasks, 9 bootstraps of {n_resamples:,}: {seconds:.3f} s (target <= 2 s)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("store", nargs="?", default=None)
    ap.add_argument("--tasks", type=int, default=72)
    ap.add_argument("--allowance", type=int, default=384)
    args = ap.parse_args()
    analysis()
    generation(Store(args.store or store_root("smoke")), args.tasks, args.allowance)


if __name__ == "__main__":
    main()
