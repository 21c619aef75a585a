"""Alert sensors, shared by every wing: every finished run's alerts (`rules.run_alerts`), written and
POSTed by core.alerts.

Runs that `apsft run` started carry the tag `apsft/runner` (run_tags.RUNNER_TAG): the runner applied
the same rules when each run ended, so the sensors skip them instead of alerting twice.
"""

from collections import Counter

import dagster as dg

from apsft_dagster.core.alerts import deliver
from apsft_dagster.run_tags import RUNNER_TAG
from apsft_dagster.sensors.rules import run_alerts


def _alert(context) -> dg.SkipReason:
    """Deliver the run's alerts; the tick's reason says what was done, so the UI's tick list tells
    why no run was requested (these sensors alert, they never request runs)."""
    run = context.dagster_run
    head = f"run {run.run_id[:8]} ({run.job_name})"
    if RUNNER_TAG in run.tags:
        return dg.SkipReason(f"{head}: started by `apsft run`, which applied these alert rules when it ended")
    delivered = [deliver(alert) for alert in run_alerts(context.instance, run.run_id)]
    if not delivered:
        return dg.SkipReason(f"{head}: no alert (no failed check, no failure)")
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(Counter(a["kind"] for a in delivered).items()))
    return dg.SkipReason(f"{head}: {len(delivered)} alert{'s' if len(delivered) > 1 else ''} delivered ({kinds})")


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, minimum_interval_seconds=30,
                      default_status=dg.DefaultSensorStatus.RUNNING)
def asset_check_alert_sensor(context: dg.RunStatusSensorContext) -> dg.SkipReason:
    """A run can succeed and still carry failed checks (a WARN check, or an ERROR one not blocking)."""
    return _alert(context)


@dg.run_failure_sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def run_failure_alert_sensor(context: dg.RunFailureSensorContext) -> dg.SkipReason:
    return _alert(context)


sensors: list = [asset_check_alert_sensor, run_failure_alert_sensor]  # every wing's runs
