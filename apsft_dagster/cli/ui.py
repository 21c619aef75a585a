"""`apsft ui`: serve the Dagster UI (`dagster dev` over workspace.yaml) for one store, its own
instance and its profile's code location, and stop all of it on exit."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

from apsft_dagster.cli.args import export_choice, profile_arguments
from apsft_dagster.core.config import load_config
from apsft_dagster.core.paths import PROJECT_ROOT, ensure_dagster_home, store_root


def add_parser(sub) -> None:
    p = sub.add_parser("ui", help="serve the Dagster UI of one store")
    profile_arguments(p)
    p.add_argument("--port", type=int, default=3000)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; Dagster OSS has no login, "
                        "so share it through an authenticating proxy, not by binding 0.0.0.0)")
    p.set_defaults(handler=ui)


def ui(args: argparse.Namespace) -> int:
    config = load_config(args.profile, args.config)  # a bad profile is refused here, before the instance is made
    export_choice(args)  # the code location's profile and store (the definitions read them from the environment)
    store = str(store_root(config.profile))  # --store, else APSFT_STORE_DIR, else the profile's own store
    ensure_dagster_home(store)  # that store's instance: its runs only (issue 58)
    _recover(store)
    cmd = [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", args.host, "-p", str(args.port)]
    proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, start_new_session=True)  # its own group, so we can end it all
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return _stop(proc)


def _recover(store: str) -> None:
    """What killed runs left: their runs marked failed and pool slots freed (a UI run whose code
    server and run worker were killed stays STARTED, holding its slot, until then), and their temp
    files swept (apsft_dagster/run_recovery.py)."""
    import dagster as dg

    from apsft_dagster.run_recovery import release_abandoned, said, sweep_leftovers

    with dg.DagsterInstance.get() as instance:
        freed = release_abandoned(instance)
    if freed:
        print(f"apsft ui: {len(freed)} run(s) whose processes were killed marked failed, their pool slots freed: "
              + ", ".join(freed), flush=True)
    said(sweep_leftovers(store))


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _stop(proc: subprocess.Popen, grace_s: float = 20.0) -> int:
    """Interrupt dagster dev; its daemon can hang on shutdown (dagster-io/dagster#3757), so after
    a grace period kill the whole process group (webserver, daemon, code servers)."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        print(f"apsft: dagster dev did not stop within {grace_s:.0f} s; killing its processes", file=sys.stderr)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return 130
