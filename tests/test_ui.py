"""`apsft ui` serves the Dagster UI on 127.0.0.1 with a project-local DAGSTER_HOME."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from apsft_dagster.core.config import PROJECT_ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ui_serves_on_loopback(tmp_path):
    port = _free_port()
    env = {**os.environ, "APSFT_STATE_DIR": str(tmp_path)}
    env.pop("DAGSTER_HOME", None)
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
        settings = tmp_path / "dagster_home" / "dagster.yaml"
        assert "enabled: false" in settings.read_text()  # telemetry off
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
