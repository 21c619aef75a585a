"""`apsft ui` serves the Dagster UI on 127.0.0.1 with a project-local DAGSTER_HOME."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from apsft_dagster.core.config import PROJECT_ROOT
from apsft_dagster.stages import STAGES

JOB_RUNS = """{ pipelineOrError(params: {pipelineName: "tasks_and_model_job", repositoryName: "__repository__",
  repositoryLocationName: "apsft_dagster.definitions"}) { ... on Pipeline { runs { runId } } ... on PythonError { message } } }"""
TIMELINE = """{ runsOrError { ... on Runs { results { runId repositoryOrigin { repositoryLocationName } } } } }"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(port: int) -> list[int]:
    """Every process in the group of the `dagster dev` serving `port` (webserver, daemon, code servers)."""
    table = [line.split(None, 2) for line in subprocess.run(["ps", "-ww", "-eo", "pid=,pgid=,args="], capture_output=True,
                                                              text=True).stdout.splitlines()]
    groups = {int(pgid) for pid, pgid, args in table if "dagster dev" in args and f"-p {port}" in args}
    return [int(pid) for pid, pgid, _ in table if int(pgid) in groups]


def _graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(request, timeout=10).read())["data"]


@pytest.mark.slow
def test_ui_serves_on_loopback_shows_headless_runs_under_their_job_and_stops_every_process(cli_run):
    """The UI over the instance of a headless `apsft run` (the session's `cli_run`)."""
    cli_proc, _, state = cli_run
    port = _free_port()
    env = {**os.environ, "APSFT_STATE_DIR": str(state)}
    for name in ("DAGSTER_HOME", "APSFT_CONFIG", "APSFT_PROFILE"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "apsft_dagster.cli", "ui", "--port", str(port)], cwd=PROJECT_ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        body, deadline = None, time.monotonic() + 120
        while body is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2).read()
            except OSError:
                time.sleep(1)
        assert body is not None and b"dagster_webserver_version" in body
        runs, deadline = None, time.monotonic() + 60
        while runs is None and time.monotonic() < deadline:  # the code location loads after the server starts
            found = _graphql(port, JOB_RUNS)["pipelineOrError"] or {}
            if "runs" in found:
                runs = found["runs"]
            else:
                time.sleep(1)
        assert runs is not None and len(runs) == 1  # the Jobs page lists the headless run under its job
        timeline = _graphql(port, TIMELINE)["runsOrError"]["results"]
        ran = [line for line in cli_proc.stdout.splitlines() if line.split()[:1] and line.split()[0].endswith("_job")
               and line.split()[1] == "ok"]  # every stage that ran (a skipped stage starts no run)
        assert len(ran) <= len(STAGES)
        origins = [r["repositoryOrigin"]["repositoryLocationName"] for r in timeline]
        assert origins == ["apsft_dagster.definitions"] * len(ran)
        settings = state / "dagster_home" / "dagster.yaml"
        assert "enabled: false" in settings.read_text()  # telemetry off
        assert _alive(port)
        proc.send_signal(signal.SIGTERM)  # to `apsft ui` alone, as a service manager would
        proc.wait(timeout=60)
        deadline = time.monotonic() + 10
        while _alive(port) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _alive(port)  # webserver, daemon and code servers all gone
    finally:
        for pid in _alive(port):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
