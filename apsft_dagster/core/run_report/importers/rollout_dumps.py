"""verl's rollout dumps (`trainer.rollout_data_dir`): `<step>.jsonl`, one sample a line with
`input` (the prompt), `output` (the completion) and `score` (its reward); other keys (`gts`,
`step`, reward extras) are kept out. Read from the run folder itself or its `rollouts/` folder.
verl names no problem id: a prompt's id is its order of first appearance (steps in order, lines
in order), so the same prompt at two steps pairs up in the before/after samples."""

from __future__ import annotations

import re
from pathlib import Path

from apsft_dagster.core.json_input import parse_json
from apsft_dagster.core.run_report import schema
from apsft_dagster.core.run_report.folder import Reader, RunReportError, fail
from apsft_dagster.core.run_report.importers.metrics import WAY_OUT, number

DUMP = re.compile(r"^(\d+)\.jsonl$")
FOLDER = "rollouts"


def files(folder: Path) -> list[Path]:
    found = [p for where in (folder, folder / FOLDER) if where.is_dir() for p in where.iterdir()
             if p.is_file() and DUMP.match(p.name)]
    return sorted(found, key=lambda p: (int(DUMP.match(p.name).group(1)), p.as_posix()))


def _text(row: dict, key: str, path: Path, line: int) -> str:
    if not isinstance(row.get(key), str):
        got = "missing" if key not in row else f"must be a string, got {type(row[key]).__name__}"
        raise fail(path, key, got, WAY_OUT, line)
    return row[key]


def _sample(row, path: Path, line: int, step: int, ids: dict[str, int]) -> schema.Sample:
    if not isinstance(row, dict):
        raise fail(path, "(line)", f"must be a JSON object, got {type(row).__name__}", WAY_OUT, line)
    prompt, completion = _text(row, "input", path, line), _text(row, "output", path, line)
    if "score" not in row:
        raise fail(path, "score", "missing; each sample needs its reward", WAY_OUT, line)
    score = number(row["score"], path, "score", line)
    if score is None:
        raise fail(path, "score", "is null; each sample needs its reward", WAY_OUT, line)
    if "step" in row and row["step"] != step:
        raise fail(path, "step", f"says step {row['step']!r} but the file name says {step}", WAY_OUT, line)
    problem = ids.setdefault(prompt, len(ids))
    return schema.Sample(problem_id=problem, prompt=prompt, completion=completion, reward=score)


def load(folder: Path, reader: Reader) -> dict[int, schema.Rollouts]:
    rollouts: dict[int, schema.Rollouts] = {}
    ids: dict[str, int] = {}
    for path in files(folder):
        step = int(DUMP.match(path.name).group(1))
        if step in rollouts:
            raise fail(path, "(file name)", f"a second rollout dump for step {step}; keep one", WAY_OUT)
        lines = reader.read(path, WAY_OUT).split(b"\n")
        samples = [_sample(parse_json(text, f"{path} line {n}", RunReportError), path, n, step, ids)
                   for n, text in enumerate(lines, start=1) if text.strip()]
        if not samples:
            raise fail(path, "(file)", "holds no samples; remove the empty dump", WAY_OUT)
        rollouts[step] = schema.Rollouts(step=step, samples=samples)
    return rollouts


def notes(rollouts: dict[int, schema.Rollouts]) -> tuple[str, ...]:
    if not rollouts:
        return ()
    return ("Rollout samples are verl's dumps (<step>.jsonl); a prompt's problem id is its order of first "
            "appearance, since the dumps name none.",)
