"""Score one task's eligible traces with an instrument (empty baselines once per task)."""

from __future__ import annotations

import polars as pl

from apsft_dagster.core.balance import exactly_once
from apsft_dagster.core.protocol import format_answer
from apsft_dagster.core.scoring import with_gains
from apsft_dagster.core.text_protocol import active

SCORE_COLUMNS = ("answer_logprob", "joint_logprob", "answer_mean", "joint_mean", "empty_answer_logprob",
                 "empty_joint_logprob", "empty_answer_mean", "empty_joint_mean", "answer_gain", "joint_gain",
                 "answer_gain_sum", "joint_gain_sum")
SCORE_SCHEMA = {"trace_id": pl.String, "task_id": pl.String, "family": pl.String, "level": pl.Int64,
                "n_thought_tokens": pl.Int64, "n_answer_tokens": pl.Int64, "n_joint_tokens": pl.Int64,
                **{c: pl.Float64 for c in SCORE_COLUMNS}, "instrument": pl.String}


def score_task(instrument, prompt: str, answer: str, traces: pl.DataFrame) -> pl.DataFrame:
    """`traces`: the task's eligible trace rows; returns one scored row per trace, sorted by id."""
    x, y = active().format_prompt(prompt), format_answer(answer)
    rows = traces.sort("trace_id").to_dicts()
    [empty] = instrument.score([(x, "", y)])
    scored = instrument.score([(x, r["thought"], y) for r in rows])
    out = [{"trace_id": r["trace_id"], "task_id": r["task_id"], "family": r["family"], "level": r["level"],
            "n_thought_tokens": r["n_thought_tokens"], **with_gains(s, empty), "instrument": instrument.name}
           for r, s in zip(rows, scored)]
    return pl.DataFrame(out, schema=SCORE_SCHEMA)


def join_problems(expected: pl.DataFrame, derived: pl.DataFrame, verb: str) -> tuple[list[str], list[str]]:
    """Join on trace id: every expected trace appears exactly once in `derived`, and nothing else
    does. The score index (eligible traces -> scores) and the R1 index (scores -> rollouts) use it."""
    tally = exactly_once(expected["trace_id"].sort(), derived["trace_id"])
    return [f"{t}: {verb} {n} times" for t, n in tally.wrong], [f"{t}: {verb} but not expected" for t in tally.extra]


def non_finite(scores: pl.DataFrame) -> list[str]:
    """Every likelihood and gain finite: the traces that are not."""
    bad = scores.filter(~pl.all_horizontal(pl.col(c).is_finite() for c in SCORE_COLUMNS))
    return [f"{t}: non-finite score" for t in bad["trace_id"].to_list()]
