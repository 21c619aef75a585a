"""`apsft`: run a profile end to end, open the UI, or validate a config.

The config is validated before Dagster or torch is imported, so a bad profile fails in well
under two seconds and writes nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from apsft_dagster.core.config import PROJECT_ROOT, load_config
from apsft_dagster.core.errors import ApsftError
from apsft_dagster.core.paths import ensure_dagster_home


def _export(args: argparse.Namespace) -> None:
    """Hand the choice to the definitions (partitions are derived from the config at load)."""
    if args.config:
        os.environ["APSFT_CONFIG"] = str(os.path.abspath(args.config))
    elif args.profile:
        os.environ["APSFT_PROFILE"] = args.profile
        os.environ.pop("APSFT_CONFIG", None)
    if getattr(args, "store", None):
        os.environ["APSFT_STORE_DIR"] = str(os.path.abspath(args.store))


def run(args: argparse.Namespace) -> int:
    config = load_config(args.profile, args.config)
    print(f"apsft: profile {config.profile}, config digest {config.digest}", flush=True)
    _export(args)
    ensure_dagster_home()
    import dagster as dg

    from apsft_dagster.definitions import defs

    result = defs.resolve_job_def("main").execute_in_process(
        instance=dg.DagsterInstance.get(), raise_on_error=False)
    failed_checks = [e for e in result.get_asset_check_evaluations() if not e.passed]
    for evaluation in result.get_asset_check_evaluations():
        status = "passed" if evaluation.passed else "FAILED"
        print(f"check {evaluation.asset_key.to_user_string()}:{evaluation.check_name} {status}")
    for event in result.get_asset_materialization_events():
        print(f"materialized {event.asset_key.to_user_string()}")
    ok = result.success and not failed_checks
    print(f"apsft: run {result.run_id} {'succeeded' if ok else 'FAILED'}")
    return 0 if ok else 1


def ui(args: argparse.Namespace) -> int:
    _export(args)
    ensure_dagster_home()
    cmd = [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(args.port)]
    return subprocess.call(cmd, cwd=PROJECT_ROOT)


def validate(args: argparse.Namespace) -> int:
    config = load_config(args.profile, args.config)
    print(f"{config.profile}: valid, digest {config.digest}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="apsft", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, handler, text in (("run", run, "materialize the main job"), ("ui", ui, "serve the Dagster UI"),
                                ("validate", validate, "validate a profile and print its digest")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--profile", help="configs/<profile>.yaml (default: $APSFT_PROFILE or smoke)")
        p.add_argument("--config", help="path to a profile YAML (wins over --profile)")
        p.set_defaults(handler=handler)
        if name == "run":
            p.add_argument("--store", help="artifact store root (default: .apsft/store/<profile>)")
        if name == "ui":
            p.add_argument("--port", type=int, default=3000)
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except ApsftError as exc:
        print(f"apsft: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
