"""Importers: each maps one source's run folder to the report's RunFolder, and says which files it reads.

Detection takes the first importer that claims the folder, in this order: the project's own
folder (native), TRL / Hugging Face Trainer, TensorBoard event files, verl / OpenRLHF JSON-lines
metrics, a W&B history export (CSV or JSON). Every importer module has NAME, claims(folder),
inputs(folder) -> (files read, files measured) and load(folder) -> RunFolder.
"""

from __future__ import annotations

from pathlib import Path

from apsft_dagster.core.run_report.folder import RunReportError
from apsft_dagster.core.run_report.importers import jsonl_logs, native, tensorboard, trl, wandb

IMPORTERS = (native, trl, tensorboard, jsonl_logs, wandb)


def detect(folder: Path):
    """The importer module for the folder, or RunReportError saying what each source looks like."""
    found = next((importer for importer in IMPORTERS if importer.claims(folder)), None)
    if found is None:
        raise RunReportError(
            f"{folder}: no run found; give the project's run folder (training_config.toml, eval_summary.json), "
            "a TRL output folder (trainer_state.json, checkpoint-<N>/), TensorBoard event files "
            "(events.out.tfevents.*), verl / OpenRLHF metrics (*.jsonl) or a W&B history export (*.csv, *.json); "
            "see docs/rl-run-report.md")
    return found


def input_files(folder: Path) -> tuple[list[str], list[str]]:
    """(files read, files measured) relative to the folder: what a change to the run would touch."""
    read, measured = detect(folder).inputs(folder)
    return [p.relative_to(folder).as_posix() for p in read], [p.relative_to(folder).as_posix() for p in measured]
