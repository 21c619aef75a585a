"""R1: one answer rollout per scored trace, continuing x + z + b; success = exact canonical answer (or, for a
task file's task, its checker: `check`, core/task_file/)."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from apsft_dagster.core.config import Rollouts
from apsft_dagster.core.engines.base import GenerationEngine, GenerationRequest
from apsft_dagster.core.seeds import derive_seed
from apsft_dagster.core.task_file.checkers import correct
from apsft_dagster.core.text_protocol import active

R1_SCHEMA = {
    "trace_id": pl.String, "task_id": pl.String, "family": pl.String, "level": pl.Int64, "seed": pl.Int64,
    "rollout_text": pl.String, "finish_reason": pl.String, "parsed_answer": pl.String, "success": pl.Boolean,
}


def r1_rollouts(engine: GenerationEngine, prompt: str, answer: str, traces: pl.DataFrame, cfg: Rollouts,
                experiment_seed: int, check: Callable[[str], bool] | None = None) -> pl.DataFrame:
    """`traces` holds the task's scored traces (trace_id, task_id, family, level, thought); `check` judges a
    parsed answer where the task comes from a file (None: the builders' exact comparison)."""
    tok = engine.tokenizer
    protocol = active()
    prefix = protocol.format_prompt(prompt)
    rows = traces.sort("trace_id").to_dicts()
    requests = [GenerationRequest(tuple(tok(prefix + r["thought"] + protocol.boundary,
                                            add_special_tokens=False)["input_ids"]),
                                  1, cfg.max_new_tokens, derive_seed(experiment_seed, "r1", r["trace_id"]))
                for r in rows]
    results = engine.generate(requests, cfg.sampling) if requests else []
    out = []
    for r, req, [completion] in zip(rows, requests, results):
        text = tok.decode(list(completion.token_ids), skip_special_tokens=False)
        parsed = protocol.parse_answer(protocol.answer_tag + text)
        out.append({"trace_id": r["trace_id"], "task_id": r["task_id"], "family": r["family"], "level": r["level"],
                    "seed": req.seed, "rollout_text": text, "finish_reason": completion.finish_reason,
                    "parsed_answer": parsed,
                    "success": correct(parsed, answer, check)})
    return pl.DataFrame(out, schema=R1_SCHEMA)
