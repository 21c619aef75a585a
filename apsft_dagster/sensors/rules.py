"""The alert rules, once: which records a finished run raises. Sensors and `apsft run` both apply them."""

from __future__ import annotations

import time

import dagster as dg

from apsft_dagster.core.alerts import check_failure_record, first_line, run_failure_record


def failed_check_alerts(instance: dg.DagsterInstance, run_id: str) -> list[dict]:
    """Alerts for the run's failed check evaluations, ERROR and WARN alike (a failed WARN check is
    recorded while its run goes on, as the parity gate's with the reference instrument: its alert is its record).

    Read per run: the default SQLite event log is sharded by run, so a global event cursor is
    not available there; run status sensors already visit every finished run exactly once."""
    alerts = []
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
        evaluation = entry.dagster_event.asset_check_evaluation_data
        if evaluation.passed:
            continue
        alerts.append(check_failure_record(
            asset_key=evaluation.asset_key.to_user_string(), check_name=evaluation.check_name,
            severity=evaluation.severity.value, run_id=run_id, partition=evaluation.partition,
            timestamp=entry.timestamp, description=evaluation.description,
            metadata={key: value.value for key, value in evaluation.metadata.items()},
        ))
    return alerts


def run_failure_alert(instance: dg.DagsterInstance, run_id: str) -> dict:
    """The failed run with each failed step's first error line (the cause, not Dagster's wrapper)."""
    record = instance.get_run_record_by_id(run_id)
    run = record.dagster_run
    failures = instance.all_logs(run_id, of_type={dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE})
    step_errors, message = {}, None
    for entry in failures:
        event = entry.dagster_event
        if event.event_type == dg.DagsterEventType.RUN_FAILURE:
            message = event.message
        elif event.step_failure_data.error:
            error = event.step_failure_data.error
            step_errors[event.step_key] = first_line((error.cause or error).message)
    # DagsterEvent carries no time; the run record's end time is the failure's (now, if a storage lacks it).
    return run_failure_record(run_id=run_id, job_name=run.job_name, timestamp=record.end_time or time.time(),
                              error=message, step_errors=step_errors, tags=dict(run.tags))


def run_alerts(instance: dg.DagsterInstance, run_id: str) -> list[dict]:
    """Every alert a finished run raises: the run itself if it failed, then its failed checks
    (a failed blocking check fails its run; a non-blocking one leaves it successful)."""
    run = instance.get_run_by_id(run_id)
    head = [run_failure_alert(instance, run_id)] if run.status == dg.DagsterRunStatus.FAILURE else []
    return head + failed_check_alerts(instance, run_id)
