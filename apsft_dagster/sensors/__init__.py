"""Alert sensors: failed ERROR-severity asset checks and failed runs, written and POSTed by core.alerts."""

import time

import dagster as dg
from dagster._core.events import DagsterEventType

from apsft_dagster.core.alerts import check_failure_record, deliver, first_line, run_failure_record

BATCH = 500  # evaluations read per tick; a larger backlog continues on the next tick from the cursor


def _check_record(event_record) -> dict | None:
    """The alert for one stored check evaluation, or None when it passed or is only a WARN."""
    evaluation = event_record.event_log_entry.dagster_event.asset_check_evaluation_data
    if evaluation.passed or evaluation.severity != dg.AssetCheckSeverity.ERROR:
        return None
    return check_failure_record(
        asset_key=evaluation.asset_key.to_user_string(), check_name=evaluation.check_name,
        severity=evaluation.severity.value, run_id=event_record.run_id, partition=evaluation.partition,
        timestamp=event_record.timestamp, description=evaluation.description,
        metadata={key: value.value for key, value in evaluation.metadata.items()},
    )


@dg.sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def asset_check_alert_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    """Alerts each failed ERROR check exactly once: the cursor is the last event storage id read."""
    after = int(context.cursor or 0)
    # instance.get_event_records is deprecated in 1.13 and there is no fetch_* for check
    # evaluations, so read the event log storage (same call, not deprecated) directly.
    records = context.instance.event_log_storage.get_event_records(
        dg.EventRecordsFilter(event_type=DagsterEventType.ASSET_CHECK_EVALUATION, after_cursor=after),
        limit=BATCH, ascending=True,
    )
    alerts = [alert for alert in map(_check_record, records) if alert is not None]
    for alert in alerts:
        deliver(alert)
    if records:
        context.update_cursor(str(records[-1].storage_id))
    return dg.SkipReason(f"{len(records)} check evaluations read, {len(alerts)} failed ERROR checks alerted")


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


sensors: list = [asset_check_alert_sensor, run_failure_alert_sensor]
