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


def _alive(port: int) -> list[int]:
    """Every process in the group of the `dagster dev` serving `port` (webserver, daemon, code servers)."""
    table = [line.split(None, 2) for line in subprocess.run(["ps", "-ww", "-eo", "pid=,pgid=,args="], capture_output=True,
                                                              text=True).stdout.splitlines()]
    groups = {int(pgid) for pid, pgid, args in table if "dagster dev" in args and f"-p {port}" in args}
    return [int(pid) for pid, pgid, _ in table if int(pgid) in groups]


def test_ui_serves_on_loopback_and_stops_every_process(tmp_path):
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
