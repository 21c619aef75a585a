"""Alert sensors: failed ERROR-severity asset checks and failed runs, written and POSTed by core.alerts."""

import time

import dagster as dg
from dagster._core.events import DagsterEventType

from apsft_dagster.core.alerts import check_failure_record, deliver, first_line, run_failure_record


def _failed_checks(instance: dg.DagsterInstance, run_id: str) -> list[dict]:
    """Alerts for the run's failed ERROR-severity check evaluations (passed and WARN ones are not).

    Read per run: the default SQLite event log is sharded by run, so a global event cursor is
    not available there; run status sensors already visit every finished run exactly once."""
    alerts = []
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION):
        evaluation = entry.dagster_event.asset_check_evaluation_data
        if evaluation.passed or evaluation.severity != dg.AssetCheckSeverity.ERROR:
            continue
        alerts.append(check_failure_record(
            asset_key=evaluation.asset_key.to_user_string(), check_name=evaluation.check_name,
            severity=evaluation.severity.value, run_id=run_id, partition=evaluation.partition,
            timestamp=entry.timestamp, description=evaluation.description,
            metadata={key: value.value for key, value in evaluation.metadata.items()},
        ))
    return alerts


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, minimum_interval_seconds=30,
                      default_status=dg.DefaultSensorStatus.RUNNING)
def asset_check_alert_sensor(context: dg.RunStatusSensorContext) -> None:
    """A run can succeed and still carry failed ERROR checks (a non-blocking check)."""
    for alert in _failed_checks(context.instance, context.dagster_run.run_id):
        deliver(alert)


@dg.run_failure_sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def run_failure_alert_sensor(context: dg.RunFailureSensorContext) -> None:
    run = context.dagster_run
    # DagsterEvent carries no time; the run record's end time is the failure's (now, if a storage lacks it).
    ended = context.instance.get_run_record_by_id(run.run_id).end_time or time.time()
    # Dagster wraps an op's own exception in DagsterExecutionStepExecutionError; the cause is the one to show.
    errors = {event.step_key: event.step_failure_data.error for event in context.get_step_failure_events()}
    step_errors = {step: first_line((error.cause or error).message) for step, error in errors.items() if error}
    deliver(run_failure_record(
        run_id=run.run_id, job_name=run.job_name, timestamp=ended,
        error=context.failure_event.message, step_errors=step_errors, tags=dict(run.tags),
    ))
    for alert in _failed_checks(context.instance, run.run_id):  # a failed blocking check fails its run
        deliver(alert)


sensors: list = [asset_check_alert_sensor, run_failure_alert_sensor]
