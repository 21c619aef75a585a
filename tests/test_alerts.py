import json
import socket
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dagster as dg
import pytest

from apsft_dagster.core.alerts import alert_path, deliver
from apsft_dagster.sensors import asset_check_alert_sensor, run_failure_alert_sensor


class Hook(BaseHTTPRequestHandler):
    received: list  # (path, headers, body) per POST, set on the subclass each test builds

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, dict(self.headers), json.loads(body)))
        self.send_response(500 if self.path == "/fail" else 200)
        self.end_headers()

    def log_message(self, *args):  # keep pytest output quiet
        pass


@pytest.fixture
def hook(tmp_path, monkeypatch):
    """A real HTTP server on 127.0.0.1; the alert env points the state folder and webhook at it."""
    handler = type("TestHook", (Hook,), {"received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("APSFT_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("APSFT_ALERT_WEBHOOK", f"{base}/hook")
    yield base, handler.received
    server.shutdown()
    server.server_close()


def _lines() -> list[dict]:
    path = alert_path()
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@dg.asset(key_prefix="alerts")
def guarded():
    return 1


@dg.asset_check(asset=guarded)
def broken():
    return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR, description="two loops",
                               metadata={"problems": 2, "first_problems": "task 7: loop\ntask 9: loop"})


@dg.asset_check(asset=guarded)
def fine():
    return dg.AssetCheckResult(passed=True, severity=dg.AssetCheckSeverity.ERROR)


@dg.asset_check(asset=guarded)
def soft():
    return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN)


@pytest.fixture
def instance():
    """A real on-disk instance: SQLite event log sharded by run, as `dagster dev` uses."""
    with dg.instance_for_test() as real:
        yield real


def test_failed_checks_are_alerted_to_file_and_webhook(hook, instance):
    """ERROR and WARN alike: a failed WARN check is recorded while its run goes on (docs/PROTOCOL.md §6)."""
    _, received = hook
    before = time.time()
    run = dg.materialize([guarded, broken, fine, soft], instance=instance)
    assert run.success  # non-blocking checks: the run succeeds with a failed ERROR check
    context = dg.build_run_status_sensor_context(
        sensor_name="asset_check_alert_sensor", dagster_instance=instance,
        dagster_run=instance.get_run_by_id(run.run_id), dagster_event=run.get_run_success_event())

    reason = asset_check_alert_sensor(context)

    assert reason.skip_message.endswith(": 2 alerts delivered (2 asset_check_failed)"), reason
    line, soft_line = sorted(_lines(), key=lambda a: a["check_name"])  # the checks' steps run in either order
    assert (soft_line["check_name"], soft_line["severity"], soft_line["run_id"]) == ("soft", "WARN", run.run_id)
    webhook = line.pop("webhook")
    assert line["kind"] == "asset_check_failed"
    assert (line["asset_key"], line["check_name"], line["severity"]) == ("alerts/guarded", "broken", "ERROR")
    assert (line["run_id"], line["partition"], line["description"]) == (run.run_id, None, "two loops")
    assert line["metadata"] == {"problems": 2, "first_problems": "task 7: loop\ntask 9: loop"}
    assert before <= datetime.fromisoformat(line["at"]).timestamp() <= time.time()
    assert line["at"].endswith("+00:00")
    [(path, headers, body)] = [r for r in received if r[2]["check_name"] == "broken"]
    assert (path, headers["Content-Type"], body) == ("/hook", "application/json", line)
    assert webhook == {"url": f"{hook[0]}/hook", "status": 200}

    clean = dg.materialize([guarded, fine], instance=instance)  # a run whose checks pass alerts nothing
    reason = asset_check_alert_sensor(dg.build_run_status_sensor_context(
        sensor_name="asset_check_alert_sensor", dagster_instance=instance,
        dagster_run=instance.get_run_by_id(clean.run_id), dagster_event=clean.get_run_success_event()))
    assert len(_lines()) == 2 and len(received) == 2
    assert reason.skip_message == f"run {clean.run_id[:8]} ({clean.dagster_run.job_name}): no alert " \
        "(no failed check, no failure)"


def test_a_run_apsft_run_started_is_left_to_it_and_the_tick_says_so(hook, instance):
    from apsft_dagster.run_tags import RUNNER_TAG

    run = dg.materialize([guarded, broken], instance=instance, tags={RUNNER_TAG: "host:1:0"})
    reason = asset_check_alert_sensor(dg.build_run_status_sensor_context(
        sensor_name="asset_check_alert_sensor", dagster_instance=instance,
        dagster_run=instance.get_run_by_id(run.run_id), dagster_event=run.get_run_success_event()))
    assert reason.skip_message.endswith("started by `apsft run`, which applied these alert rules when it ended")
    assert _lines() == [] and hook[1] == []


@dg.asset(key_prefix="alerts", check_specs=[dg.AssetCheckSpec("sealed", asset=["alerts", "blocked"], blocking=True)])
def blocked():
    yield dg.Output(1)
    yield dg.AssetCheckResult(check_name="sealed", passed=False, severity=dg.AssetCheckSeverity.ERROR)


def test_failed_blocking_check_fails_the_run_and_both_are_alerted(hook, instance):
    result = dg.materialize([blocked], instance=instance, raise_on_error=False)
    assert not result.success
    context = dg.build_run_status_sensor_context(
        sensor_name="run_failure_alert_sensor", dagster_instance=instance,
        dagster_run=instance.get_run_by_id(result.run_id), dagster_event=result.get_run_failure_event(),
    ).for_run_failure()

    reason = run_failure_alert_sensor(context)

    assert "2 alerts delivered (1 asset_check_failed, 1 run_failed)" in reason.skip_message
    run_line, check_line = _lines()
    assert (run_line["kind"], run_line["run_id"]) == ("run_failed", result.run_id)
    assert (check_line["kind"], check_line["asset_key"], check_line["check_name"]) == (
        "asset_check_failed", "alerts/blocked", "sealed")
    assert [body["kind"] for _, _, body in hook[1]] == ["run_failed", "asset_check_failed"]


@dg.op
def explode():
    raise ValueError("shard 3 hash mismatch: rerun trace_bank")


@dg.job(tags={"stage": "trace_bank"})
def doomed():
    explode()


def test_failed_run_is_alerted_with_its_step_error(hook, instance):
    _, received = hook
    result = doomed.execute_in_process(instance=instance, raise_on_error=False)
    context = dg.build_run_status_sensor_context(
        sensor_name="run_failure_alert_sensor", dagster_instance=instance,
        dagster_run=instance.get_run_by_id(result.run_id), dagster_event=result.get_run_failure_event(),
    ).for_run_failure()

    run_failure_alert_sensor(context)

    [line] = _lines()
    assert line.pop("webhook")["status"] == 200
    assert (line["kind"], line["run_id"], line["job_name"]) == ("run_failed", result.run_id, "doomed")
    assert "doomed" in line["error"] and "explode" in line["error"]  # the run's own failure message
    assert line["step_errors"] == {"explode": "ValueError: shard 3 hash mismatch: rerun trace_bank"}
    assert line["tags"]["stage"] == "trace_bank"
    assert received[0][2] == line


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_webhook_failures_are_recorded_not_raised(hook):
    base, received = hook
    down = f"http://127.0.0.1:{_closed_port()}/hook"

    refused = deliver({"kind": "run_failed", "run_id": "a"}, url=down, timeout=2)
    rejected = deliver({"kind": "run_failed", "run_id": "b"}, url=f"{base}/fail", timeout=2)

    first, second = _lines()  # both kept, in order, each saying what happened to its POST
    assert first == refused and first["run_id"] == "a" and "status" not in first["webhook"]
    assert first["webhook"]["url"] == down and "refused" in first["webhook"]["error"].lower()
    assert second == rejected and second["webhook"]["status"] == 500 and "500" in second["webhook"]["error"]
    assert [body for _, _, body in received] == [{"kind": "run_failed", "run_id": "b"}]


def test_no_webhook_configured_only_writes_the_line(hook, monkeypatch):
    monkeypatch.setenv("APSFT_ALERT_WEBHOOK", "")
    assert deliver({"kind": "run_failed", "note": "é"}) == {"kind": "run_failed", "note": "é"}
    assert alert_path().read_text(encoding="utf-8") == '{"kind": "run_failed", "note": "é"}\n'
    assert hook[1] == []
