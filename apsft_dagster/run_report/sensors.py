"""The RL run inbox: a folder dropped into `run_report.inbox` becomes a run partition and its report.

Each subfolder is a run (its name the run id), in any format an importer reads. A new folder, or
one whose input files changed since the sensor last saw it (the files its importer reads, by
SHA-256, and the checkpoint files it measures, by size; subfolders included), is validated and
registered, added as a partition of `rl_run` and requested on `run_report_job`; the cursor keeps
each folder's fingerprint, so nothing runs twice. A folder no importer recognizes yet (still being
copied) is looked at again next time; a malformed one is skipped with its error until it changes.
"""

import json
from pathlib import Path

import dagster as dg

from apsft_dagster.core.paths import state_dir
from apsft_dagster.core.run_report.ingest import RunReportError
from apsft_dagster.core.run_report.registry import folder_digests, register
from apsft_dagster.core.run_report.settings import run_report_settings
from apsft_dagster.core.store import fingerprint
from apsft_dagster.resources import ExperimentResource
from apsft_dagster.run_report.partitions import rl_run_partitions


def inbox_path(inbox: str) -> Path:
    path = Path(inbox)
    return path if path.is_absolute() else state_dir() / path


@dg.sensor(job_name="run_report_job", minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def rl_inbox_sensor(context: dg.SensorEvaluationContext, experiment: ExperimentResource):
    inbox = inbox_path(run_report_settings(experiment.config()).inbox)
    if not inbox.is_dir():
        return dg.SkipReason(f"no inbox folder {inbox}; create it and drop a run folder into it")
    seen, new = json.loads(context.cursor or "{}"), []
    for folder in sorted(p for p in inbox.iterdir() if p.is_dir()):
        try:
            digest = fingerprint(folder_digests(folder))
        except RunReportError as exc:
            context.log.info(f"inbox: {folder.name} not read yet: {exc}")
            continue
        if seen.get(folder.name) == digest:
            continue
        seen[folder.name] = digest
        try:
            register(experiment.store(), folder.name, folder)
        except RunReportError as exc:
            context.log.warning(f"inbox: {folder.name} skipped: {exc}")
            continue
        new.append((folder.name, digest))
    if not new:
        return dg.SensorResult(skip_reason=dg.SkipReason("no new or changed run folders"),
                               cursor=json.dumps(seen, sort_keys=True))
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=name, run_key=f"{name}:{digest[:16]}") for name, digest in new],
        dynamic_partitions_requests=[rl_run_partitions.build_add_request([name for name, _ in new])],
        cursor=json.dumps(seen, sort_keys=True))
