"""Registered runs: a run id (the partition key) bound to a folder and the SHA-256 of its files.

The inbox sensor (or `apsft rl-report add`) registers a folder; the assets read it only while its
files still hash to the registration, so a report always names the exact inputs it describes.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from apsft_dagster.core.run_report.names import rl_file
from apsft_dagster.core.names import check_name
from apsft_dagster.core.run_report.ingest import RunFolder, RunReportError
from apsft_dagster.core.run_report.signals import hack_signals
from apsft_dagster.core.run_report.settings import HackThresholds
from apsft_dagster.core.store import Store, sha256_file

SOURCE = "source.json"
SIGNALS = ("repeated_greetings", "phrase_repetition", "sign_off_spam", "repeated_lines", "repeated_ngram",
           "over_word_limit", "unfaithful")


def folder_digests(folder: Path) -> dict[str, str]:
    """SHA-256 of every file directly in the folder, by name (what a change to the run would touch)."""
    return {p.name: sha256_file(p) for p in sorted(Path(folder).iterdir()) if p.is_file()}


def register(store: Store, run_id: str, folder: str | Path) -> dict:
    check_name(run_id, "run", RunReportError)
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise RunReportError(f"run {run_id}: {folder} is not a folder; give the run's artifact folder")
    record = {"run": run_id, "folder": str(folder), "files": folder_digests(folder)}
    store.put_json(rl_file(run_id, SOURCE), record)
    return record


def registered(store: Store, run_id: str) -> dict:
    check_name(run_id, "run", RunReportError)
    if not store.exists(rl_file(run_id, SOURCE)):
        raise RunReportError(f"run {run_id}: not registered in {store.root}; drop its folder into the inbox or run "
                             f"`apsft rl-report add {run_id} FOLDER`")
    return store.get_json(rl_file(run_id, SOURCE))


def check_unchanged(record: dict, run: RunFolder) -> None:
    """The files the run was loaded from are the files registered (names and SHA-256s)."""
    registered_inputs = {k: v for k, v in record["files"].items() if k in run.sha256}
    if run.sha256 != registered_inputs:
        changed = sorted(k for k in set(run.sha256) | set(registered_inputs)
                         if run.sha256.get(k) != registered_inputs.get(k))
        raise RunReportError(f"run {record['run']}: {', '.join(changed)} in {record['folder']} changed after "
                             f"registration; register the folder again to report on the new files")


def sample_table(run_id: str, run: RunFolder, thresholds: HackThresholds) -> pl.DataFrame:
    """One row per rollout sample with its signals (the SQL audits' `rl_samples` view)."""
    rows = []
    for step, doc in sorted(run.rollouts.items()):
        for index, sample in enumerate(doc.samples):
            signals = hack_signals(sample.completion, prompt=sample.prompt, thresholds=thresholds)
            rows.append({"run": run_id, "step": step, "sample": index, "problem_id": sample.problem_id,
                         "reward": float(sample.reward), "words": len(sample.completion.split()),
                         "hacked": signals["hacked"], **{s: bool(signals[s]) for s in SIGNALS}})
    schema = {"run": pl.String, "step": pl.Int64, "sample": pl.Int64, "problem_id": pl.Int64, "reward": pl.Float64,
              "words": pl.Int64, "hacked": pl.Boolean, **{s: pl.Boolean for s in SIGNALS}}
    return pl.DataFrame(rows, schema=schema)
