"""Decoding whose closed rows leave the batch (core/engines/decode.py) vs Hugging Face's `generate`,
which steps every row until the last one closes: the same requests, model, sampler and batch.

The work is a profile's harvest batch as the engine forms it (two tasks x N samples = 128 rows, at each
level, the harvest's sampling and allowance, the profile's threads), its evaluation batch (greedy, one
row a task, evaluation's allowance) and an R1 batch (one answer rollout per trace the level-3 batch
drew). Both sides must draw the same tokens (checked); the figure is wall seconds, best of 2, and the
rows x steps each side ran. Target: retiring >= 1.2x `generate` on the laptop profile's evaluation
and R1 batches, >= 0.9x on every harvest batch (whose rows close close together).

Run: .venv/bin/python benchmarks/bench_decode.py [PROFILE]   (laptop by default; its shipped model)
"""

from __future__ import annotations

import sys
import time

import torch
from transformers import LogitsProcessorList

from apsft_dagster.core.config import load_config
from apsft_dagster.core.embedded.shipped import SHIPPED
from apsft_dagster.core.engines.base import GREEDY, GenerationRequest, cut_at_stop
from apsft_dagster.core.engines.seeded_sampler import SeededSampler
from apsft_dagster.core.engines.transformers_engine import TransformersEngine
from apsft_dagster.core.protocol import BOUNDARY, STOP_TOKENS, THINK_CLOSE, prompt_ids
from apsft_dagster.core.seeds import derive_seed
from apsft_dagster.core.tasks.catalog import build_catalog


def shipped_model(profile: str) -> str:
    """The shipped entry whose build report names this profile's width (smoke: the smallest model)."""
    import json

    entries = sorted(SHIPPED.iterdir(), key=lambda p: json.loads((p / "cache_entry.json").read_text())
                     ["report"]["parameters"])
    qwen35 = [p for p in entries if "Qwen3_5" in (p / "config.json").read_text()]
    return str(qwen35[-1] if profile == "laptop" else qwen35[0])


def padded(engine: TransformersEngine, requests, sampling) -> tuple[list, int]:
    """The engine's batch as it ran before: one `generate` over every row (rows x steps it ran)."""
    pad, width = engine.tokenizer.pad_token_id, max(len(r.prompt_ids) for r in requests)
    rows = [r.prompt_ids for r in requests for _ in range(r.n)]
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in rows])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows])
    seeds = [(seed, 1) for r in requests for seed in r.sample_seeds()]  # each sample alone, as the engine draws
    sampler = [] if sampling.temperature == 0 else [SeededSampler(seeds, sampling)]
    stops, limit = engine.stop_token_ids, requests[0].max_tokens
    out = engine.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=limit, do_sample=False,
                                eos_token_id=list(stops), pad_token_id=pad,
                                logits_processor=LogitsProcessorList(sampler))
    new = out[:, width:]
    return [cut_at_stop(row, stops, limit) for row in new.tolist()], len(rows) * new.shape[1]


def timed(run) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(2):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    profile = sys.argv[1] if len(sys.argv) > 1 else "laptop"
    config = load_config(profile)
    torch.set_num_threads(config.compute.threads)
    model = shipped_model(profile)
    engine = TransformersEngine.load(model, STOP_TOKENS)
    catalog = build_catalog(config)
    train = catalog.filter(catalog["split"] == "train").sort("task_id")
    evals = catalog.filter(catalog["split"] == "core_iid").sort("task_id")
    h = config.harvest
    cases = {f"harvest batch, level {level}": (
        [GenerationRequest(prompt_ids(engine.tokenizer, p), h.samples_per_task, h.allowance,
                           derive_seed(config.seeds.experiment, t, "main"))
         for t, p in train.filter(train["level"] == level).head(2).select("task_id", "prompt").iter_rows()],
        h.sampling) for level in (1, 2, 3)}
    cases["evaluation batch"] = ([GenerationRequest(prompt_ids(engine.tokenizer, p), 1, config.evaluation.allowance, 0)
                                  for p in evals["prompt"].head(48)], GREEDY)
    print(f"{profile}: {model}, {config.compute.threads} thread(s)")
    for name, (requests, sampling) in cases.items():
        compare(engine, name, requests, sampling)
    # R1: one answer rollout per level-3 trace, continuing x + z + b (core/rollouts.py)
    requests, _ = cases["harvest batch, level 3"]
    traces = engine.generate(requests, h.sampling)
    rest = tuple(engine.tokenizer(BOUNDARY.removeprefix(THINK_CLOSE), add_special_tokens=False)["input_ids"])
    r1 = [GenerationRequest(r.prompt_ids + c.token_ids + rest, 1, config.rollouts.max_new_tokens, 7 + i)
          for r, cs in zip(requests, traces) for i, c in enumerate(cs) if c.finish_reason == "stop"]
    compare(engine, "R1 batch (level 3)", r1, config.rollouts.sampling)


def compare(engine: TransformersEngine, name: str, requests, sampling) -> None:
    old_s, (old, old_work) = timed(lambda: padded(engine, requests, sampling))
    new_s, new = timed(lambda: [c for cs in engine.generate(requests, sampling) for c in cs])
    assert new == old, f"{name}: the retiring loop drew other tokens than generate"
    work = sum(len(c.token_ids) for c in new)  # rows x steps the retiring loop ran (one per token)
    lengths = sorted(len(c.token_ids) for c in new)
    print(f"{name}: {len(new)} rows, lengths {lengths[0]}-{lengths[-1]} (median {lengths[len(lengths) // 2]}); "
          f"generate {old_s:.2f} s ({old_work:,} row-steps), retiring {new_s:.2f} s ({work:,} row-steps): "
          f"{old_s / new_s:.2f}x")


if __name__ == "__main__":
    main()
