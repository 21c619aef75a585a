"""Trainers' logged metrics by step, mapped to the report's eval summary and train reward.

Eval metrics are the keys a trainer logs for evaluation: `eval_*` (Hugging Face / TRL),
`eval/*` (the same through TensorBoard or W&B; OpenRLHF), `val-*` and `val/*` (verl), less the
bookkeeping ones (runtime, throughput, epoch, step, token counts). A metric's direction is
inferred from its key: loss, perplexity (ppl) and length are lower-is-better, every other key
higher-is-better; the report says so. The train reward is the first of REWARD_KEYS the log has.
A value logged twice for one step and key must agree; NaN (or an infinity) is a missing value.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from apsft_dagster.core.run_report import schema
from apsft_dagster.core.run_report.folder import RunReportError, fail

EVAL_PREFIXES = ("eval_", "eval/", "val-", "val/")
BOOKKEEPING = {"runtime", "samples_per_second", "steps_per_second", "epoch", "global_step", "step", "num_tokens"}
LOWER_IS_BETTER = ("loss", "perplexity", "ppl", "length")
# TRL (and Hugging Face's TensorBoard/W&B names for it), OpenRLHF, verl's sequence score, verl's KL-shaped reward
REWARD_KEYS = ("reward", "train/reward", "critic/score/mean", "critic/rewards/mean")
STEP_KEYS = ("step", "_step", "global_step", "train/global_step", "eval/global_step")
WAY_OUT = "re-export the file from the trainer or fix it (docs/rl-run-report.md, 'Importing a trainer's logs')"


def is_eval(key: str) -> bool:
    if not key.startswith(EVAL_PREFIXES):
        return False
    rest = re.split(r"[/_]", key, maxsplit=1)[1] if key.startswith("eval_") else key.split("/", 1)[-1]
    return rest not in BOOKKEEPING and rest.rsplit("/", 1)[-1] not in BOOKKEEPING


def used(key: str) -> bool:
    return key in REWARD_KEYS or is_eval(key)


def higher_is_better(key: str) -> bool:
    words = re.split(r"[^a-z0-9]+", key.lower())
    return not any(w in LOWER_IS_BETTER or w.endswith("length") or w.endswith("loss") for w in words)


def number(value, path: Path, field: str, line: int | None = None) -> float | None:
    """A logged value: a number, or None for null, NaN and infinities; anything else names the file, line and field."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(path, field, f"must be a number or null, got {type(value).__name__} {str(value)[:40]!r}",
                   WAY_OUT, line)
    value = float(value)
    return value if math.isfinite(value) else None


def step_of(value, path: Path, field: str, line: int | None = None) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(path, field, f"a step is a whole number >= 0, got {str(value)[:40]!r}", WAY_OUT, line)
    return value


class StepTable:
    """Values by step and key, from one or more logs of a run."""

    def __init__(self) -> None:
        self.values: dict[int, dict[str, float | None]] = {}

    def put(self, step: int, key: str, value: float | None, path: Path, field: str, line: int | None = None):
        row = self.values.setdefault(step, {})
        if value is not None and row.get(key) is not None and row[key] != value:
            raise fail(path, field, f"step {step} logs {key} twice with different values ({row[key]} and {value}); "
                                    f"keep one", WAY_OUT, line)
        if value is not None or key not in row:
            row[key] = value

    def add_row(self, row, path: Path, where: str = "", line: int | None = None) -> None:
        """One logged row (a JSON object): its step and the values of the keys the report reads."""
        if not isinstance(row, dict):
            raise fail(path, where or "(line)", f"must be a JSON object, got {type(row).__name__}", WAY_OUT, line)
        if isinstance(row.get("data"), dict) and "step" in row:  # verl's file logger: {"step": N, "data": {...}}
            row = {**row["data"], "step": row["step"]}
        key = next((k for k in STEP_KEYS if k in row), None)
        if key is None:
            raise fail(path, where + "step", f"missing; each logged row needs its step (one of {list(STEP_KEYS)})",
                       WAY_OUT, line)
        step = step_of(row[key], path, where + key, line)
        for name, value in row.items():
            if used(name):
                self.put(step, name, number(value, path, where + name, line), path, where + name, line)

    def keys(self) -> set[str]:
        return {k for row in self.values.values() for k, v in row.items() if v is not None}


def eval_summary(table: StepTable, files: str) -> schema.EvalSummary:
    keys = sorted(k for k in table.keys() if is_eval(k))
    if not keys:
        raise RunReportError(f"{files}: no eval metric logged (keys starting {', '.join(EVAL_PREFIXES)}); the "
                             f"report compares eval scores by step, so log an evaluation (e.g. eval_steps) and "
                             f"import the run again")
    steps = [schema.EvalStep(step=s, scores={k: row[k] for k in keys if row.get(k) is not None})
             for s, row in sorted(table.values.items()) if any(row.get(k) is not None for k in keys)]
    return schema.EvalSummary(metrics=[schema.Metric(key=k, label=k, higher_is_better=higher_is_better(k))
                                       for k in keys], steps=steps)


def train_reward(table: StepTable) -> tuple[schema.TrainReward | None, str | None]:
    key = next((k for k in REWARD_KEYS if k in table.keys()), None)
    if key is None:
        return None, None
    steps = [schema.RewardStep(step=s, reward_mean=row[key]) for s, row in sorted(table.values.items())
             if row.get(key) is not None]
    return schema.TrainReward(steps=steps), key


def notes(evals: schema.EvalSummary, reward_key: str | None) -> tuple[str, ...]:
    lower = [m.key for m in evals.metrics if not m.higher_is_better]
    higher = [m.key for m in evals.metrics if m.higher_is_better]
    said = ["Metric direction is inferred from each key (loss, perplexity and length: lower is better; every "
            "other key: higher is better): " + "; ".join(
                part for part in (f"lower is better for {', '.join(lower)}" if lower else "",
                                  f"higher is better for {', '.join(higher)}" if higher else "") if part) + "."]
    if reward_key:
        said.append(f"The train reward is the logged `{reward_key}`.")
    return tuple(said)
