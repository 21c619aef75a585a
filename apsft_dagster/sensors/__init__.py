"""Alert sensors, shared by every wing: every finished run's alerts (`rules.run_alerts`), written and
POSTed by core.alerts.

Runs that `apsft run` started carry the tag `apsft/alerts: runner`: the runner applied the same
rules when each run ended, so the sensors skip them instead of alerting twice.
"""

import dagster as dg

from apsft_dagster.core.alerts import deliver
from apsft_dagster.sensors.rules import run_alerts

RUNNER_TAG = ("apsft/alerts", "runner")


def _alert(context) -> None:
    run = context.dagster_run
    if run.tags.get(RUNNER_TAG[0]) == RUNNER_TAG[1]:
        return
    for alert in run_alerts(context.instance, run.run_id):
        deliver(alert)


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, minimum_interval_seconds=30,
                      default_status=dg.DefaultSensorStatus.RUNNING)
def asset_check_alert_sensor(context: dg.RunStatusSensorContext) -> None:
    """A run can succeed and still carry failed ERROR checks (a non-blocking check)."""
    _alert(context)


@dg.run_failure_sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def run_failure_alert_sensor(context: dg.RunFailureSensorContext) -> None:
    _alert(context)


sensors: list = [asset_check_alert_sensor, run_failure_alert_sensor]  # every wing's runs
