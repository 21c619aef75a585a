"""`apsft rl-report add NAME FOLDER`: register an RL run's artifact folder as run NAME (a partition)
and write its report now (what the inbox sensor does when a folder is dropped into the inbox)."""

from __future__ import annotations

import argparse
import sys

PARTITIONS = "rl_run"


def add_parser(sub) -> None:
    p = sub.add_parser("rl-report", help="the RL run report (seed 000): register a run folder and report on it")
    p.add_argument("action", choices=("add",))
    p.add_argument("name", help="run id (letters, digits, '.', '_', '-')")
    p.add_argument("folder", help="the run's artifact folder (shapes: README, 'RL run report')")
    p.add_argument("--profile", help="configs/<profile>.yaml (default: $APSFT_PROFILE or smoke)")
    p.add_argument("--config", help="path to a profile YAML (wins over --profile)")
    p.add_argument("--store", help="artifact store root (default: .apsft/store/<profile>)")
    p.set_defaults(handler=rl_report)


def rl_report(args: argparse.Namespace) -> int:
    import dagster as dg

    from apsft_dagster.cli import _export, _store
    from apsft_dagster.core.layout import rl_file
    from apsft_dagster.core.paths import ensure_dagster_home
    from apsft_dagster.core.run_report import load_run
    from apsft_dagster.core.run_report.registry import register

    config, store = _store(args)
    _export(args)
    load_run(args.folder)  # a malformed folder is refused here, naming the file and field, before anything is written
    record = register(store, args.name, args.folder)
    ensure_dagster_home()
    instance = dg.DagsterInstance.get()
    if not instance.has_dynamic_partition(PARTITIONS, args.name):
        instance.add_dynamic_partitions(PARTITIONS, [args.name])
    from apsft_dagster.definitions import defs
    from apsft_dagster.runner import run_stages
    from apsft_dagster.stages import RUN_REPORT_STAGES

    outcomes = run_stages(defs, instance, RUN_REPORT_STAGES, partition_keys={"run_report_job": [args.name]})
    if not all(o.ok for o in outcomes):
        print(f"apsft rl-report: {args.name} stopped at {outcomes[-1].job}; `apsft ui` shows the failed run or check",
              file=sys.stderr)
        return 1
    evidence = store.get_json(rl_file(args.name, "evidence.json"))
    print(f"{args.name}: {len(record['files'])} files from {record['folder']}")
    print(f"verdict: {evidence['verdict']['verdict']} (rule {evidence['verdict']['rule']})")
    print(f"report: {store.path(rl_file(args.name, 'report.md'))}")
    return 0
