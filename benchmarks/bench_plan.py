"""`apsft plan`'s projection against a finished run (issue 35, item 4): this machine's stage
throughputs, measured on the store's own model with the stages' own code, written as a rehearsal
file `apsft plan --rehearsal` reads; the plan over that store (its lengths: the expected tokens)
at those throughputs; and each stage's projection beside the stage time the run measured.

Measured (tokens over wall seconds, one round, after a warm-up of the same work):
- transformers_generation: `harvest_task` on `--tasks` train tasks (generated tokens; the plan prices
  harvest, R1's new tokens, the probe and evaluation at it);
- scoring: the reference instrument's `score_task` on those tasks' eligible traces (record tokens);
- training: `measure_throughput` on the first `training.warmup_records` x 4 records of an arm file;
- merge: `merge_snapshot` of one stored adapter;
- pretrain_step: seconds a pretraining step of the embedded recipe (`embedded.batch_size` worked
  solutions), over 10 steps of a fresh model.

The run's stage times come from its `apsft run` log (`--run-log`: the lines `  <job>  ok  <s> s ...`).

Run: .venv/bin/python benchmarks/bench_plan.py --profile laptop --run-log laptop_run.log [--store DIR]
     [--tasks 4] [--out laptop_rehearsal.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# each plan row's key -> the stage jobs whose times it projects
JOBS = {"model_build": ("tasks_and_model_job",), "harvest": ("trace_bank_job",),
        "parity_gate": ("bank_and_parity_job",), "scoring": ("score_bank_job", "score_bank_index_job"),
        "r1_rollouts": ("r1_labels_job", "r1_labels_index_job"), "training": ("adapters_job",),
        "merge": ("merged_models_job",), "stage_a_evaluation": ("stage_a_generations_job", "stage_a_eval_job")}
LINE = re.compile(r"^\s+(\w+_job)\s+ok\s+([\d.]+) s")


def measure(bench, config, store) -> dict:
    """The rehearsal document's figures, measured on the store's model."""
    import torch

    from apsft_dagster.core.base_model import base_model_path
    from apsft_dagster.core.layout import ADAPTERS
    from apsft_dagster.core.training.loop import attach_adapter, load_base, measure_throughput
    from apsft_dagster.core.training.merge import merge_snapshot
    from apsft_dagster.core.training.policy import arm_records
    from apsft_dagster.core.training.records import encode_rows

    bench.harvest()  # warm-up
    generated, seconds = _count(bench.harvest)
    scored, score_s = _count(bench.scoring)
    path = str(base_model_path(config, store))
    rows = arm_records(store, "random_natural")[0][:4 * max(1, config.training.warmup_records)]
    model, *_ = attach_adapter(load_base(path, config.compute), config.training, 0)
    training = measure_throughput(model, encode_rows(rows, bench.tok, config.training), config.training)
    del model
    adapter = sorted(p for p in store.path(ADAPTERS).iterdir() if p.is_dir())[0]
    with tempfile.TemporaryDirectory() as scratch:
        _, merge_s = _count(lambda: merge_snapshot(path, adapter, Path(scratch) / "merged"))
    return {"format": "apsft-gpu-rehearsal/1", "tiny": False, "device": f"cpu ({torch.get_num_threads()} threads)",
            "dimensions": f"{config.profile}'s own model (the store's)", "torch": torch.__version__,
            "transformers_generation": {"tokens_per_s": generated / seconds, "new_tokens": generated,
                                        "seconds": seconds},
            "scoring": {"bank": {"tokens_per_s": scored / score_s, "tokens": scored, "seconds": score_s}},
            "training": {"tokens_per_s": training}, "merge": {"seconds": merge_s},
            "pretrain_step": {"seconds": pretrain_step_seconds(config)},
            "vllm": {"measured": False, "reason": "the profile's harvest.backend is transformers"}}


def _count(work) -> tuple[int, float]:
    started = time.perf_counter()
    tokens = work()
    return tokens, time.perf_counter() - started


def pretrain_step_seconds(config, steps: int = 10) -> float:
    """Seconds a step of the embedded recipe's pretraining, on a fresh model (its tokenizer trained here)."""
    from apsft_dagster.core.embedded.build import pretraining_tasks
    from apsft_dagster.core.embedded.layout import VISION_TOKENS, build_model
    from apsft_dagster.core.embedded.model import encode_examples, pretrain
    from apsft_dagster.core.embedded.tokenizer import train_tokenizer
    from apsft_dagster.core.protocol import format_record, format_thought

    cfg = config.embedded.model_copy(update={"train_steps": steps + 1})
    corpus = pretraining_tasks(config, set())
    tokenizer = train_tokenizer([format_record(t.prompt, format_thought(t.solution), t.answer) for t in corpus],
                                cfg.vocab_size, VISION_TOKENS if config.model.architecture == "qwen3_5" else ())
    _, model = build_model(config.model.architecture, cfg, tokenizer, config.seeds.experiment)
    examples = encode_examples(corpus, tokenizer)
    stamps = []
    pretrain(model, examples, cfg, config.seeds.experiment, tokenizer.pad_token_id,
             lambda step, loss: stamps.append(time.perf_counter()))
    return (stamps[-1] - stamps[0]) / steps  # the first step (allocation) left out


def stage_times(log: Path) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in map(LINE.match, log.read_text().splitlines()) if m}


def compare(rows: list[dict], times: dict[str, float]) -> list[tuple[str, float, float]]:
    """(stage, projected seconds at the expected tokens, measured seconds) for each priced stage."""
    out = []
    for row in rows:
        jobs = JOBS.get(row["key"])
        if row["kind"] == "stage" and jobs and row["hours_low"] is not None and all(j in times for j in jobs):
            projected = 3600 * (row["hours_low"] + row["hours_high"]) / 2
            out.append((row["stage"], projected, sum(times[j] for j in jobs)))
    return out


def main() -> None:
    from bench_stages import Bench

    import apsft_dagster  # noqa: F401  first: the CPU kernels are pinned before torch loads
    from apsft_dagster.core.config import load_config
    from apsft_dagster.core.engines.lifetime import pin_threads
    from apsft_dagster.core.paths import store_root
    from apsft_dagster.core.plan import plan
    from apsft_dagster.core.plan.table import render
    from apsft_dagster.core.store import Store

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="laptop")
    parser.add_argument("--store")
    parser.add_argument("--run-log", required=True, help="the finished run's `apsft run` output")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--out", default="plan_rehearsal.json")
    args = parser.parse_args()
    config = load_config(args.profile)
    pin_threads(config.compute)
    store_dir = args.store or str(store_root(config.profile))
    doc = measure(Bench(args.profile, store_dir, args.tasks, 32), config, Store(store_dir))
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    rows = plan(config, Store(store_dir), args.out)
    print(render(rows), end="")
    print(f"\n{'stage':36} {'projected s':>12} {'measured s':>11} {'ratio':>6}")
    for stage, projected, measured in compare(rows, stage_times(Path(args.run_log))):
        print(f"{stage:36} {projected:12.1f} {measured:11.1f} {projected / measured:6.2f}")


if __name__ == "__main__":
    main()
