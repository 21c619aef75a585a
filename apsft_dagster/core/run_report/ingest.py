"""Ingest an RL run's folder: detect who wrote it, then read, hash, validate and cross-check it.

Sources (core/run_report/importers/, one module each): the project's own folder (shapes in
importers/native.py), TRL / Hugging Face Trainer output, TensorBoard event files, verl or
OpenRLHF JSON-lines metrics, a W&B history export. Nothing is returned until every file read has
passed, so bad input yields an error naming the file (and line, for JSON lines and CSV) and field,
and no result.
"""

from __future__ import annotations

from pathlib import Path

from apsft_dagster.core.run_report.folder import RunFolder, RunReportError
from apsft_dagster.core.run_report.importers import detect

__all__ = ["RunFolder", "RunReportError", "load_run"]


def load_run(folder: str | Path) -> RunFolder:
    """Read, hash and validate every input of the run folder; raise RunReportError on the first problem."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RunReportError(f"{folder}: not a run folder (no such directory); point at the run's artifact folder")
    return detect(folder).load(folder)
