"""Registered runs: a run id (the partition key) bound to a folder and the SHA-256 of its files.

The inbox sensor (or `apsft rl-report add`) registers a folder once it reads whole (a malformed
folder is refused and nothing is registered); the assets read it only while its files still hash
to the registration, so a report always names the exact inputs it describes. The inputs are the
files the folder's importer reads (paths relative to the folder, subfolders included) and the
sizes of the files it measures (checkpoint weights).
"""

from __future__ import annotations

from pathlib import Path

from apsft_dagster.core.names import check_name
from apsft_dagster.core.run_report.importers import input_files
from apsft_dagster.core.run_report.ingest import RunFolder, RunReportError, load_run
from apsft_dagster.core.run_report.names import rl_file
from apsft_dagster.core.store import Store, sha256_file

SOURCE = "source.json"


def folder_digests(folder: Path) -> dict[str, str]:
    """What a change to the run would touch, without parsing it: the SHA-256 of each file its importer reads
    and `size:<bytes>` of each it measures, by path relative to the folder."""
    folder = Path(folder)
    read, measured = input_files(folder)
    sizes = {k: f"size:{(folder / k).stat().st_size}" for k in measured}
    return {**{k: sha256_file(folder / k) for k in read}, **sizes}


def register(store: Store, run_id: str, folder: str | Path) -> dict:
    check_name(run_id, "run", RunReportError)
    folder = Path(folder).resolve()
    if not folder.is_dir():
        raise RunReportError(f"run {run_id}: {folder} is not a folder; give the run's artifact folder")
    run = load_run(folder)  # a malformed folder stops here, naming the file and field: nothing is registered
    record = {"run": run_id, "folder": str(folder), "format": run.source_format, "files": run.sha256,
              "sizes": run.sizes}
    store.put_json(rl_file(run_id, SOURCE), record)
    return record


def registered(store: Store, run_id: str) -> dict:
    check_name(run_id, "run", RunReportError)
    if not store.exists(rl_file(run_id, SOURCE)):
        raise RunReportError(f"run {run_id}: not registered in {store.root}; drop its folder into the inbox or run "
                             f"`apsft rl-report add {run_id} FOLDER`")
    return store.get_json(rl_file(run_id, SOURCE))


def check_unchanged(record: dict, run: RunFolder) -> None:
    """The files the run was loaded from are the files registered (paths and SHA-256s; measured files' sizes)."""
    legacy = "format" not in record  # registered before importers: every file of the folder, by name
    registered_inputs = {k: v for k, v in record["files"].items() if not legacy or k in run.sha256}
    now = {**run.sha256, **{k: f"size:{v}" for k, v in run.sizes.items()}}
    then = {**registered_inputs, **{k: f"size:{v}" for k, v in record.get("sizes", {}).items()}}
    if now != then:
        changed = sorted(k for k in set(now) | set(then) if now.get(k) != then.get(k))
        raise RunReportError(f"run {record['run']}: {', '.join(changed)} in {record['folder']} changed after "
                             f"registration; register the folder again to report on the new files")

