"""Ingest an RL run's artifact folder: every file read once, hashed, validated, cross-checked.

Nothing is returned until every file has passed, so bad input yields an error and no result.

Folder shapes (unknown keys are errors except under [training]; statuses are UPPER_CASE words):

`training_config.toml` (run metadata and config)
    [run]       id, name, base_model (strings, required); platform, environment, started,
                completed (strings, optional)
    [training]  steps, batch_size, rollouts_per_example (positive ints, required);
                task_set, reward_mode (strings, optional); any other trainer keys are kept
`eval_summary.json` (eval summary by step and metric)
    {"metrics": [{"key": str, "label": str, "higher_is_better": bool = true}, ...],
     "steps": [{"step": int, "scores": {metric key: number | null}}, ...]}
    null (or an absent key) is a missing value; a step needs at least one value.
`train_reward.json` (train reward by step)
    {"steps": [{"step": int, "reward_mean": number}, ...]}
`usage.json` (usage and cost; costs read as exact decimals)
    {"usage": [{"kind": str, "tokens": int, "cost_usd": number}, ...]}
`checkpoints.json` (checkpoints with status and size)
    {"checkpoints": [{"step": int, "id": str, "status": "READY" | "UPLOADING" | ...,
                      "size_bytes": int | null}, ...]}        a READY checkpoint needs its size
`adapters.json` (adapters with status and deployability)
    {"adapters": [{"step": int | null, "id": str, "status": str, "deployment_status": str,
                   "deployable": bool}, ...]}
`rollouts_step_<N>.json` (rollout samples of saved step N; zero or more files)
    {"step": N, "samples": [{"problem_id": int, "prompt": str, "completion": str,
                             "reward": number}, ...]}
Steps are unique within each file. Other files in the folder (a README) are not inputs.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from pydantic import BaseModel, ValidationError

from apsft_dagster.core.errors import ApsftError
from apsft_dagster.core.json_input import error_field, parse_json
from apsft_dagster.core.run_report import schema

CONFIG_FILE = "training_config.toml"
JSON_FILES = {
    "eval_summary.json": schema.EvalSummary,
    "train_reward.json": schema.TrainReward,
    "usage.json": schema.Usage,
    "checkpoints.json": schema.Checkpoints,
    "adapters.json": schema.Adapters,
}
ROLLOUT_FILE = re.compile(r"^rollouts_step_(\d+)\.json$")
SHAPES_DOC = "the shapes in apsft_dagster/core/run_report/ingest.py"


class RunReportError(ApsftError, ValueError):
    """A run folder's file is missing, unreadable or not in its documented shape (fail closed)."""


@dataclass(frozen=True)
class RunFolder:
    """A validated run: one typed document per file, rollouts by step, SHA-256 per input file."""

    config: schema.TrainingConfig
    evals: schema.EvalSummary
    train_reward: schema.TrainReward
    usage: schema.Usage
    checkpoints: schema.Checkpoints
    adapters: schema.Adapters
    rollouts: dict[int, schema.Rollouts]
    sha256: dict[str, str]


def _fail(path: Path, field: str, problem: str) -> RunReportError:
    return RunReportError(f"{path}: field {field!r}: {problem}; fix the file to match {SHAPES_DOC}")


def _read(path: Path, hashes: dict[str, str]) -> bytes:
    if not path.is_file():
        raise _fail(path, "(file)", "the file is missing; write it into the run folder")
    data = path.read_bytes()
    hashes[path.name] = hashlib.sha256(data).hexdigest()
    return data


def _parse(path: Path, data: bytes, model: type[BaseModel]) -> BaseModel:
    if path.suffix == ".toml":
        try:
            raw = tomllib.loads(data.decode())
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise _fail(path, "(file)", f"not valid TOML ({exc or 'nested too deeply'})") from None
    else:  # costs are money: exact decimals, never binary floats; strict JSON (core/json_input.py)
        try:
            raw = parse_json(data, str(path), RunReportError,
                             **({"parse_float": Decimal} if model is schema.Usage else {}))
        except RunReportError as exc:
            raise _fail(path, "(file)", str(exc).removeprefix(f"{path}: ")) from None
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = error_field(err)
        message = "unknown key; remove it or check its spelling" if err["type"] == "extra_forbidden" else err["msg"]
        more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
        raise _fail(path, field, message + more) from None


def _unique_steps(path: Path, field: str, steps: list[int | None]) -> None:
    seen: set[int] = set()
    for i, step in enumerate(steps):
        if step in seen:
            raise _fail(path, f"{field}.{i}.step", f"step {step} appears twice; keep one entry per step")
        if step is not None:
            seen.add(step)


def _check_evals(path: Path, evals: schema.EvalSummary) -> None:
    keys = [m.key for m in evals.metrics]
    for i, key in enumerate(keys):
        if key in keys[:i]:
            raise _fail(path, f"metrics.{i}.key", f"metric {key!r} is declared twice")
    _unique_steps(path, "steps", [s.step for s in evals.steps])
    for i, entry in enumerate(evals.steps):
        unknown = sorted(set(entry.scores) - set(keys))
        if unknown:
            raise _fail(path, f"steps.{i}.scores", f"step {entry.step} has undeclared metric(s) {unknown}; "
                                                   f"declare them under 'metrics' or remove them")
        if all(v is None for v in entry.scores.values()):
            raise _fail(path, f"steps.{i}.scores", f"step {entry.step} has no metric values; give at least one "
                                                   f"of {keys} or drop the step")


def _check_sizes(path: Path, checkpoints: schema.Checkpoints) -> None:
    for i, ckpt in enumerate(checkpoints.checkpoints):
        if ckpt.status == "READY" and ckpt.size_bytes is None:
            raise _fail(path, f"checkpoints.{i}.size_bytes", f"checkpoint {ckpt.id} is READY but has no size")


def _load_rollouts(folder: Path, hashes: dict[str, str]) -> dict[int, schema.Rollouts]:
    rollouts: dict[int, schema.Rollouts] = {}
    for path in sorted(folder.glob("rollouts_step_*.json")):
        match = ROLLOUT_FILE.match(path.name)
        if match is None:
            raise _fail(path, "(file name)", "rollout files are named rollouts_step_<N>.json with N a step number")
        doc = _parse(path, _read(path, hashes), schema.Rollouts)
        if doc.step != int(match.group(1)):
            raise _fail(path, "step", f"says step {doc.step} but the file name says {int(match.group(1))}")
        if doc.step in rollouts:
            raise _fail(path, "step", f"a second rollout file for step {doc.step}; keep one")
        rollouts[doc.step] = doc
    return dict(sorted(rollouts.items()))


def load_run(folder: str | Path) -> RunFolder:
    """Read, hash and validate every input of the run folder; raise RunReportError on the first problem."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RunReportError(f"{folder}: not a run folder (no such directory); point at the run's artifact folder")
    hashes: dict[str, str] = {}
    docs = {name: _parse(folder / name, _read(folder / name, hashes), model) for name, model in JSON_FILES.items()}
    config = _parse(folder / CONFIG_FILE, _read(folder / CONFIG_FILE, hashes), schema.TrainingConfig)
    _check_evals(folder / "eval_summary.json", docs["eval_summary.json"])
    _unique_steps(folder / "train_reward.json", "steps", [s.step for s in docs["train_reward.json"].steps])
    _unique_steps(folder / "checkpoints.json", "checkpoints", [c.step for c in docs["checkpoints.json"].checkpoints])
    _unique_steps(folder / "adapters.json", "adapters", [a.step for a in docs["adapters.json"].adapters])
    _check_sizes(folder / "checkpoints.json", docs["checkpoints.json"])
    rollouts = _load_rollouts(folder, hashes)
    return RunFolder(config=config, evals=docs["eval_summary.json"], train_reward=docs["train_reward.json"],
                     usage=docs["usage.json"], checkpoints=docs["checkpoints.json"], adapters=docs["adapters.json"],
                     rollouts=rollouts, sha256=dict(sorted(hashes.items())))
