"""verl's and OpenRLHF's metric logs as JSON lines: `*.jsonl` in the run folder (not `<step>.jsonl`,
which are rollout dumps). One object a line with its step (`step`, `_step`, `global_step`,
`train/global_step` or `eval/global_step`) and metric keys: verl's file logger
(`trainer.logger=['file']`, VERL_FILE_LOGGER_PATH) writes `{"step": N, "data": {"critic/score/mean":
..., "val-core/<data_source>/reward/mean@1": ..., "response_length/mean": ...}}`, flat rows work too;
OpenRLHF logs `train/reward`, `train/global_step` and `eval/...` keys."""

from __future__ import annotations

from pathlib import Path

from apsft_dagster.core.run_report.folder import Reader, RunFolder
from apsft_dagster.core.run_report.importers import assemble, rollout_dumps
from apsft_dagster.core.run_report.importers.metrics import WAY_OUT, StepTable
from apsft_dagster.core.run_report.importers.trainer_json import parse

NAME = "jsonl"
PLATFORM = "verl / OpenRLHF (JSON-lines metrics)"


def files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.jsonl") if p.is_file() and not rollout_dumps.DUMP.match(p.name))


def claims(folder: Path) -> bool:
    return bool(files(folder))


def inputs(folder: Path) -> tuple[list[Path], list[Path]]:
    return sorted(files(folder) + rollout_dumps.files(folder)), []


def load(folder: Path) -> RunFolder:
    reader = Reader(folder)
    table = StepTable()
    logs = files(folder)
    for path in logs:
        for n, text in enumerate(reader.read(path, WAY_OUT).split(b"\n"), start=1):
            if text.strip():
                table.add_row(parse(text, f"{path} line {n}"), path, line=n)
    names = ", ".join(str(p) for p in logs)
    return assemble.run_folder(folder, reader, table, NAME, names, assemble.config(folder, platform=PLATFORM))
