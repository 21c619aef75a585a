"""Parsing a generation into the evaluation table (kept apart from generating: a parser change
never regenerates).

A completion is natural thinking: the thought, `</think>`, then `\\n\\nANSWER: <answer>` and the
end of turn. `closed` = `</think>` was emitted within the allowance; `parsed` = an `ANSWER:` line
was found after `</think>`; `correct` = its normalized answer equals the canonical answer (a task
file's task: its checker says so, `checks` from core/task_file/source.py's `answer_checks`);
`loop` = the thought's tokens end in an exact periodic loop (the trace bank's detector).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import polars as pl

from apsft_dagster.core.config import LoopThresholds
from apsft_dagster.core.loops import find_loop
from apsft_dagster.core.task_file.checkers import correct
from apsft_dagster.core.text_protocol import active

SCHEMA = {"policy": pl.String, "arm": pl.String, "seed": pl.Int64, "task_id": pl.String, "split": pl.String,
          "family": pl.String, "level": pl.Int64, "prompt_tokens": pl.Int64, "completion_tokens": pl.Int64,
          "thought_tokens": pl.Int64, "forward_tokens": pl.Int64, "finish_reason": pl.String, "closed": pl.Boolean,
          "loop": pl.Boolean, "parsed": pl.Boolean, "answer": pl.String, "correct": pl.Boolean,
          "token_ids": pl.List(pl.Int64), "text": pl.String}


Checks = Mapping[str, Callable[[str], bool]] | None  # task id -> its checker; None: the exact comparison


def parse_one(token_ids: list[int], tokenizer, close_id: int, canonical: str, loop: LoopThresholds,
              check: Callable[[str], bool] | None = None) -> dict:
    text = tokenizer.decode(token_ids, skip_special_tokens=False)
    closed = close_id in token_ids
    thought_ids = token_ids[:token_ids.index(close_id)] if closed else token_ids
    answer = active().parse_answer(text.split(active().think_close, 1)[1]) if closed else None
    return {"closed": closed, "thought_tokens": len(thought_ids), "text": text,
            "loop": find_loop(thought_ids, loop.min_repeats, loop.max_period, loop.min_span) is not None,
            "parsed": answer is not None, "answer": answer,
            "correct": correct(answer, canonical, check)}


def _check(checks: Checks, task_id: str) -> Callable[[str], bool] | None:
    return None if checks is None else checks[task_id]


def eval_table(policy: str, arm: str, seed: int | None, generations: pl.DataFrame, tasks: pl.DataFrame, tokenizer,
               loop: LoopThresholds, checks: Checks = None) -> pl.DataFrame:
    """One row per eval task, in task order."""
    close_id = tokenizer.convert_tokens_to_ids(active().think_close)
    by_task = {r["task_id"]: r for r in generations.iter_rows(named=True)}
    rows = []
    for task in tasks.sort("task_id").iter_rows(named=True):
        g = by_task[task["task_id"]]
        ids = list(g["token_ids"])
        rows.append({"policy": policy, "arm": arm, "seed": seed, "task_id": task["task_id"], "split": task["split"],
                     "family": task["family"], "level": task["level"], "prompt_tokens": g["prompt_tokens"],
                     "completion_tokens": len(ids), "forward_tokens": g["prompt_tokens"] + len(ids),
                     "finish_reason": g["finish_reason"], "token_ids": ids,
                     **parse_one(ids, tokenizer, close_id, task["answer"], loop, _check(checks, task["task_id"]))})
    return pl.DataFrame(rows, schema=SCHEMA)


SAMPLE_SCHEMA = {"policy": pl.String, "arm": pl.String, "seed": pl.Int64, "task_id": pl.String, "split": pl.String,
                 "family": pl.String, "level": pl.Int64, "sample": pl.Int64, "canonical": pl.String,
                 "thought_tokens": pl.Int64, "forward_tokens": pl.Int64, "closed": pl.Boolean, "loop": pl.Boolean,
                 "parsed": pl.Boolean, "answer": pl.String, "correct": pl.Boolean}


def sample_table(policy: str, arm: str, seed: int | None, samples: pl.DataFrame, tasks: pl.DataFrame, tokenizer,
                 loop: LoopThresholds, checks: Checks = None) -> pl.DataFrame:
    """Stage B's k samples per task parsed: one row per (task, sample), in task then sample order."""
    close_id = tokenizer.convert_tokens_to_ids(active().think_close)
    task_by_id = {t["task_id"]: t for t in tasks.iter_rows(named=True)}
    rows = []
    for g in samples.sort("task_id", "sample").iter_rows(named=True):
        task, ids = task_by_id[g["task_id"]], list(g["token_ids"])
        parsed = parse_one(ids, tokenizer, close_id, task["answer"], loop, _check(checks, task["task_id"]))
        rows.append({"policy": policy, "arm": arm, "seed": seed, "task_id": task["task_id"], "split": task["split"],
                     "family": task["family"], "level": task["level"], "sample": g["sample"],
                     "canonical": task["answer"], "forward_tokens": g["prompt_tokens"] + len(ids),
                     **{k: parsed[k] for k in ("thought_tokens", "closed", "loop", "parsed", "answer", "correct")}})
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA)
