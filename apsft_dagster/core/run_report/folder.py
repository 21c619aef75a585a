"""A validated run, whatever wrote its folder: the typed sections, the rollouts, and what was read.

Every importer (core/run_report/importers/) returns a RunFolder. A section the source does not
record (train reward, usage, checkpoints, adapters, rollouts) is None or empty and named in
`not_recorded`; it is never a zero.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from apsft_dagster.core.errors import ApsftError
from apsft_dagster.core.run_report import schema

SECTIONS = ("train_reward", "usage", "checkpoints", "adapters", "rollouts")  # the ones a source may lack
NOT_RECORDED = "not recorded"


class RunReportError(ApsftError, ValueError):
    """A run folder's file is missing, unreadable or not in its documented shape (fail closed)."""


@dataclass(frozen=True)
class RunFolder:
    """A validated run: one typed document per section, rollouts by step, SHA-256 per input file.

    `sha256` keys are paths relative to the folder ("checkpoint-100/adapter_config.json"); `sizes`
    holds the files measured but not read (weights: their size, not their bytes)."""

    config: schema.TrainingConfig
    evals: schema.EvalSummary
    train_reward: schema.TrainReward | None
    usage: schema.Usage | None
    checkpoints: schema.Checkpoints | None
    adapters: schema.Adapters | None
    rollouts: dict[int, schema.Rollouts]
    sha256: dict[str, str]
    source_format: str = "native"
    not_recorded: tuple[str, ...] = ()
    sizes: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # the importer's choices in words (metric directions, the reward key)


def missing_sections(train_reward, usage, checkpoints, adapters, rollouts) -> tuple[str, ...]:
    """The SECTIONS a run lacks, in SECTIONS order."""
    values = (train_reward, usage, checkpoints, adapters, rollouts or None)
    return tuple(name for name, value in zip(SECTIONS, values) if value is None)


def fail(path: Path, field_name: str, problem: str, way_out: str, line: int | None = None) -> RunReportError:
    where = f"{path} line {line}" if line is not None else str(path)
    return RunReportError(f"{where}: field {field_name!r}: {problem}; {way_out}")


class Reader:
    """Reads a run folder's input files, keeping each one's SHA-256 under its path relative to the folder."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.sha256: dict[str, str] = {}
        self.sizes: dict[str, int] = {}

    def key(self, path: Path) -> str:
        return path.relative_to(self.folder).as_posix()

    def read(self, path: Path, way_out: str) -> bytes:
        if not path.is_file():
            raise fail(path, "(file)", "the file is missing; write it into the run folder", way_out)
        data = path.read_bytes()
        self.sha256[self.key(path)] = hashlib.sha256(data).hexdigest()
        return data

    def measure(self, path: Path) -> int:
        size = path.stat().st_size
        self.sizes[self.key(path)] = size
        return size
