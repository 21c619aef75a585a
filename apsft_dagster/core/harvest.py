"""The natural-thought protocol: sample, continue once, detect loops, judge eligibility, top up.

Per task: a main batch of N samples with the natural-close allowance; every sample that reaches
the allowance without closing and is not an exact periodic loop gets exactly one continuation of
its exact token prefix (at most `continuation` more tokens). Eligible = emits its own
`</think>`, is not a loop, and the whole training record fits `record_limit` tokens. Nothing is
force-closed. While fewer than `min_eligible` traces are eligible, up to `topup_batches`
deterministic batches of `topup_size` are added; a task still short is marked excluded (all its
rows say so), never dropped.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import polars as pl

from apsft_dagster.core.config import Harvest
from apsft_dagster.core.engines.base import Completion, GenerationEngine, GenerationRequest
from apsft_dagster.core.loops import find_loop
from apsft_dagster.core.protocol import format_answer
from apsft_dagster.core.seeds import derive_seed
from apsft_dagster.core.text_protocol import active

TRACE_SCHEMA = {
    "trace_id": pl.String, "task_id": pl.String, "family": pl.String, "level": pl.Int64,
    "batch": pl.String, "sample_index": pl.Int64, "seed": pl.Int64, "continuation_seed": pl.Int64,
    "thought": pl.String, "token_ids": pl.List(pl.Int64), "n_tokens": pl.Int64, "n_thought_tokens": pl.Int64,
    "n_record_tokens": pl.Int64, "closed": pl.Boolean, "continued": pl.Boolean, "loop": pl.Boolean,
    "loop_period": pl.Int64, "eligible": pl.Boolean, "finish_reason": pl.String, "token_sha256": pl.String,
    "task_excluded": pl.Boolean,
}


@dataclass(frozen=True)
class HarvestTask:
    task_id: str
    family: str
    level: int
    prompt: str
    answer: str


def batch_plan(cfg: Harvest) -> list[tuple[str, int]]:
    return [("main", cfg.samples_per_task)] + [(f"topup{k}", cfg.topup_size) for k in range(1, cfg.topup_batches + 1)]


def harvest_task(engine: GenerationEngine, tokenizer, task: HarvestTask, cfg: Harvest,
                 experiment_seed: int) -> pl.DataFrame:
    """All trace rows of one task, deterministic given the engine, the config and the task id."""
    protocol = active()
    prompt_text = protocol.format_prompt(task.prompt)
    ids = protocol.prompt_ids(tokenizer, task.prompt)
    close_id = tokenizer.convert_tokens_to_ids(protocol.think_close)
    rows: list[dict] = []
    for batch, n in batch_plan(cfg):
        if batch != "main" and sum(r["eligible"] for r in rows) >= cfg.min_eligible:
            break
        seed = derive_seed(experiment_seed, task.task_id, batch)
        [samples] = engine.generate([GenerationRequest(ids, n, cfg.allowance, seed)], cfg.sampling)
        continued = _continue(engine, ids, samples, cfg, seed)
        for index, sample in enumerate(samples):
            rows.append(_row(tokenizer, task, prompt_text, batch, index, seed, sample, continued.get(index),
                             close_id, cfg))
    excluded = sum(r["eligible"] for r in rows) < cfg.min_eligible
    return pl.DataFrame([{**r, "task_excluded": excluded} for r in rows], schema=TRACE_SCHEMA)


def _loop(ids, cfg: Harvest):
    return find_loop(ids, cfg.loop.min_repeats, cfg.loop.max_period, cfg.loop.min_span)


def _continue(engine, prompt_ids, samples: list[Completion], cfg: Harvest,
              seed: int) -> dict[int, tuple[int, Completion]]:
    """Exactly one continuation for every allowance contact that is not an exact loop."""
    wanted = [i for i, s in enumerate(samples) if s.finish_reason == "length" and _loop(s.token_ids, cfg) is None]
    requests = [GenerationRequest(prompt_ids + samples[i].token_ids, 1, cfg.continuation,
                                  derive_seed(seed, "continuation", i)) for i in wanted]
    results = engine.generate(requests, cfg.sampling) if requests else []
    return {i: (req.seed, out[0]) for i, req, out in zip(wanted, requests, results)}


def _row(tokenizer, task: HarvestTask, prompt_text: str, batch: str, index: int, seed: int,
         sample: Completion, continuation, close_id: int, cfg: Harvest) -> dict:
    ids, finish = sample.token_ids, sample.finish_reason
    if continuation is not None:
        ids, finish = ids + continuation[1].token_ids, continuation[1].finish_reason
    closed = bool(ids) and ids[-1] == close_id
    thought_ids = ids[:-1] if closed else ids
    thought = tokenizer.decode(list(thought_ids), skip_special_tokens=False)
    loop = _loop(ids, cfg)
    protocol = active()
    record = len(protocol.locate_spans(tokenizer, prompt_text, thought, format_answer(task.answer),
                                       protocol.end).input_ids)
    return {
        "trace_id": f"{task.task_id}/{batch}/{index:03d}", "task_id": task.task_id, "family": task.family,
        "level": task.level, "batch": batch, "sample_index": index, "seed": seed,
        "continuation_seed": None if continuation is None else continuation[0],
        "thought": thought, "token_ids": list(ids), "n_tokens": len(ids), "n_thought_tokens": len(thought_ids),
        "n_record_tokens": record, "closed": closed, "continued": continuation is not None,
        "loop": loop is not None, "loop_period": None if loop is None else loop.period,
        "eligible": closed and loop is None and record <= cfg.record_limit,
        "finish_reason": "close" if closed else ("length" if finish == "length" else "end_of_turn"),
        "token_sha256": hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest(),
    }
