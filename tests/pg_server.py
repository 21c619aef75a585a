"""A throwaway PostgreSQL server on 127.0.0.1 for the PostgreSQL lane (tests/test_postgres_lane.py).

`initdb` into a fresh folder (owned by the `postgres` user when the tests run as root: PostgreSQL
refuses to run as root), `pg_ctl start` on a free port with password authentication, and
`pg_ctl stop -m immediate` plus removal of the folder when done, whatever happened (a killed test
process included: a detached watchdog does it when the process is gone). The binaries
come from the distribution's packages (`scripts/system_packages.sh` installs them).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from conftest import free_port

USER, PASSWORD, DATABASE = "apsft", "apsft-test-only", "dagster"


@dataclass(frozen=True)
class Server:
    host: str
    port: int
    folder: Path  # data directory, socket and log; removed when the server stops

    def env(self) -> dict[str, str]:
        """What deploy/dagster.yaml reads."""
        return {"APSFT_PG_HOST": self.host, "APSFT_PG_PORT": str(self.port), "APSFT_PG_USER": USER,
                "APSFT_PG_PASSWORD": PASSWORD, "APSFT_PG_DB": DATABASE}


def bin_dir() -> Path:
    """The newest installed server's binaries (Debian keeps them out of PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise RuntimeError("PostgreSQL's server binaries (initdb, pg_ctl) are not installed: run "
                       "`bash scripts/system_packages.sh` (apt-get install postgresql) and rerun")


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextmanager
def running_server():
    binaries = bin_dir()
    folder = Path(tempfile.mkdtemp(prefix="apsft-pg-"))
    data, pwfile, log = folder / "data", folder / "pw", folder / "server.log"
    pwfile.write_text(PASSWORD + "\n")
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
        shutil.chown(pwfile, "postgres", "postgres")
    run = lambda cmd: subprocess.run(_as_server_user(cmd), check=True, capture_output=True, text=True)  # noqa: E731
    server = Server("127.0.0.1", free_port(), folder)
    stop = " ".join(_as_server_user([str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]))
    # the stop happens even if this process is killed (SIGKILL skips `finally`): a detached watchdog
    # waits for end-of-file on a pipe only this process writes to (the kernel closes it when the
    # process dies), then stops the server and removes its folder
    watchdog = subprocess.Popen(["bash", "-c", f"cat >/dev/null; {stop} >/dev/null 2>&1; rm -rf {folder}"],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        run([str(binaries / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={pwfile}",
             "--auth=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8"])
        run([str(binaries / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "start", "-o",
             f"-h {server.host} -p {server.port} -k {folder} -c fsync=off -c full_page_writes=off"])
        _createdb(binaries, server)
        yield server
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(stop.split(), capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
        watchdog.stdin.close()
        watchdog.wait()


def restart(server: Server) -> None:
    """Stop the server as a crash would (`-m immediate`: no checkpoint, every connection cut) and
    start it again on the same port and data, the way an operator's restart or a failover does."""
    pg_ctl = str(bin_dir() / "pg_ctl")  # -l: the new server logs to the file, never to a pipe this process would
    subprocess.run(_as_server_user([pg_ctl, "-D", str(server.folder / "data"), "-l", str(server.folder / "server.log"),
                                    "-m", "immediate", "-w", "-t", "60", "restart"]),  # wait on until it exits
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _createdb(binaries: Path, server: Server) -> None:
    subprocess.run([str(binaries / "createdb"), "-h", server.host, "-p", str(server.port), "-U", USER, DATABASE],
                   check=True, capture_output=True, text=True, env={**os.environ, "PGPASSWORD": PASSWORD})
