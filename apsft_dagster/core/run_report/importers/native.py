"""The project's own run folder: `training_config.toml`, `eval_summary.json` and optional section files.

Folder shapes (unknown keys are errors except under [training]; statuses are UPPER_CASE words):

`training_config.toml` (run metadata and config; required)
    [run]       id, name, base_model (strings, required); platform, environment, started,
                completed (strings, optional)
    [training]  steps, batch_size, rollouts_per_example (positive ints, required);
                task_set, reward_mode (strings, optional); any other trainer keys are kept
`eval_summary.json` (eval summary by step and metric; required)
    {"metrics": [{"key": str, "label": str, "higher_is_better": bool = true}, ...],
     "steps": [{"step": int, "scores": {metric key: number | null}}, ...]}
    null (or an absent key) is a missing value; a step needs at least one value.
`train_reward.json` (train reward by step; optional)
    {"steps": [{"step": int, "reward_mean": number}, ...]}
`usage.json` (usage and cost, read as exact decimals; optional)
    {"usage": [{"kind": str, "tokens": int, "cost_usd": number}, ...]}
`checkpoints.json` (checkpoints with status and size; optional)
    {"checkpoints": [{"step": int, "id": str, "status": "READY" | "UPLOADING" | ...,
                      "size_bytes": int | null}, ...]}        a READY checkpoint needs its size
`adapters.json` (adapters with status and deployability; optional)
    {"adapters": [{"step": int | null, "id": str, "status": str, "deployment_status": str | null,
                   "deployable": bool | null}, ...]}          null: not recorded
`rollouts_step_<N>.json` (rollout samples of saved step N; zero or more files)
    {"step": N, "samples": [{"problem_id": int, "prompt": str, "completion": str,
                             "reward": number}, ...]}
An optional file that is absent is a section not recorded; one that is present must be well formed.
Steps are unique within each file. Other files in the folder (a README) are not inputs.
"""

from __future__ import annotations

import re
import tomllib
from decimal import Decimal
from pathlib import Path

from pydantic import BaseModel, ValidationError

from apsft_dagster.core.json_input import error_field, parse_json
from apsft_dagster.core.run_report import schema
from apsft_dagster.core.run_report.folder import Reader, RunFolder, RunReportError, fail, missing_sections

NAME = "native"
CONFIG_FILE = "training_config.toml"
EVAL_FILE = "eval_summary.json"
OPTIONAL_FILES = {
    "train_reward.json": schema.TrainReward,
    "usage.json": schema.Usage,
    "checkpoints.json": schema.Checkpoints,
    "adapters.json": schema.Adapters,
}
ROLLOUT_FILE = re.compile(r"^rollouts_step_(\d+)\.json$")
SHAPES_DOC = "fix the file to match the shapes in apsft_dagster/core/run_report/importers/native.py"


def _fail(path: Path, field: str, problem: str) -> RunReportError:
    return fail(path, field, problem, SHAPES_DOC)


def claims(folder: Path) -> bool:
    return (folder / CONFIG_FILE).is_file() or (folder / EVAL_FILE).is_file()


def inputs(folder: Path) -> tuple[list[Path], list[Path]]:
    """(files read, files measured): what a change to the run would touch."""
    names = [CONFIG_FILE, EVAL_FILE, *OPTIONAL_FILES]
    read = [folder / n for n in names if (folder / n).is_file()] + sorted(folder.glob("rollouts_step_*.json"))
    return sorted(read), []


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


def _check_sections(folder: Path, docs: dict) -> None:
    """Steps unique in each optional file present; a READY checkpoint has its size."""
    rows = {"train_reward.json": ("steps", lambda d: d.steps), "checkpoints.json": ("checkpoints",
            lambda d: d.checkpoints), "adapters.json": ("adapters", lambda d: d.adapters)}
    for name, (field, entries) in rows.items():
        if docs.get(name) is not None:
            _unique_steps(folder / name, field, [e.step for e in entries(docs[name])])
    for i, ckpt in enumerate(docs["checkpoints.json"].checkpoints if docs.get("checkpoints.json") else []):
        if ckpt.status == "READY" and ckpt.size_bytes is None:
            raise _fail(folder / "checkpoints.json", f"checkpoints.{i}.size_bytes",
                        f"checkpoint {ckpt.id} is READY but has no size")


def _load_rollouts(folder: Path, reader: Reader) -> dict[int, schema.Rollouts]:
    rollouts: dict[int, schema.Rollouts] = {}
    for path in sorted(folder.glob("rollouts_step_*.json")):
        match = ROLLOUT_FILE.match(path.name)
        if match is None:
            raise _fail(path, "(file name)", "rollout files are named rollouts_step_<N>.json with N a step number")
        doc = _parse(path, reader.read(path, SHAPES_DOC), schema.Rollouts)
        if doc.step != int(match.group(1)):
            raise _fail(path, "step", f"says step {doc.step} but the file name says {int(match.group(1))}")
        if doc.step in rollouts:
            raise _fail(path, "step", f"a second rollout file for step {doc.step}; keep one")
        rollouts[doc.step] = doc
    return dict(sorted(rollouts.items()))


def load(folder: Path) -> RunFolder:
    """Read, hash and validate every input of the folder; raise RunReportError on the first problem."""
    reader = Reader(folder)
    evals = _parse(folder / EVAL_FILE, reader.read(folder / EVAL_FILE, SHAPES_DOC), schema.EvalSummary)
    docs = {name: _parse(folder / name, reader.read(folder / name, SHAPES_DOC), model) if (folder / name).exists()
            else None for name, model in OPTIONAL_FILES.items()}
    config = _parse(folder / CONFIG_FILE, reader.read(folder / CONFIG_FILE, SHAPES_DOC), schema.TrainingConfig)
    _check_evals(folder / EVAL_FILE, evals)
    _check_sections(folder, docs)
    rollouts = _load_rollouts(folder, reader)
    sections = (docs["train_reward.json"], docs["usage.json"], docs["checkpoints.json"], docs["adapters.json"])
    return RunFolder(config=config, evals=evals, train_reward=sections[0], usage=sections[1],
                     checkpoints=sections[2], adapters=sections[3], rollouts=rollouts,
                     sha256=dict(sorted(reader.sha256.items())), source_format=NAME,
                     not_recorded=missing_sections(*sections, rollouts))
