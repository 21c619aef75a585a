"""`apsft ui` serves the Dagster UI on 127.0.0.1 with a project-local DAGSTER_HOME."""

import json
import signal
import time
import urllib.request

import pytest
from browser import alive, served_ui

from apsft_dagster.stages import STAGES

JOB_RUNS = """{ pipelineOrError(params: {pipelineName: "tasks_and_model_job", repositoryName: "__repository__",
  repositoryLocationName: "apsft_dagster.definitions"}) { ... on Pipeline { runs { runId } } ... on PythonError { message } } }"""
TIMELINE = """{ runsOrError { ... on Runs { results { runId repositoryOrigin { repositoryLocationName } } } } }"""


def _graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(request, timeout=10).read())["data"]


@pytest.mark.slow
def test_ui_serves_on_loopback_shows_headless_runs_under_their_job_and_stops_every_process(cli_run):
    """The UI over the instance of a headless `apsft run` (the session's `cli_run`)."""
    cli_proc, _, state = cli_run
    with served_ui(state) as (port, proc):
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=10).read()
        assert b"dagster_webserver_version" in body
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
        assert alive(port)
        proc.send_signal(signal.SIGTERM)  # to `apsft ui` alone, as a service manager would
        proc.wait(timeout=60)
        deadline = time.monotonic() + 10
        while alive(port) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not alive(port)  # webserver, daemon and code servers all gone
