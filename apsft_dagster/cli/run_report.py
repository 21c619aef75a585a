"""`apsft rl-report add NAME FOLDER`: register an RL run's artifact folder as run NAME (a partition)
and write its report now (what the inbox sensor does when a folder is dropped into the inbox)."""

from __future__ import annotations

import argparse

from apsft_dagster.cli.args import export_choice, profile_arguments, profile_store


def add_parser(sub) -> None:
    p = sub.add_parser("rl-report", help="the RL run report with a reward-hacking audit: register a run folder "
                                         "and report on it")
    p.add_argument("action", choices=("add",))
    p.add_argument("name", help="run id (letters, digits, '.', '_', '-')")
    p.add_argument("folder", help="the run's artifact folder (its files' shapes: docs/rl-run-report.md)")
    profile_arguments(p)
    p.set_defaults(handler=rl_report)


def rl_report(args: argparse.Namespace) -> int:
    from apsft_dagster.core.names import check_name
    from apsft_dagster.core.run_report import RunReportError, load_run
    from apsft_dagster.core.run_report.names import rl_file
    from apsft_dagster.core.run_report.registry import register
    from apsft_dagster.core.run_report.settings import run_report_settings
    from apsft_dagster.run_report.partitions import RL_RUN
    from apsft_dagster.run_report.stages import RUN_REPORT_STAGES
    from apsft_dagster.runner import run_wing_partition

    check_name(args.name, "run", RunReportError)  # the cheapest mistake is named first
    config, store = profile_store(args)
    run_report_settings(config)  # a profile without the section is refused before anything is written
    export_choice(args)
    load_run(args.folder)  # a malformed folder is refused here, naming the file and field, before anything is written
    record = register(store, args.name, args.folder)
    if not run_wing_partition(RUN_REPORT_STAGES, RL_RUN, args.name):
        return 1
    evidence = store.get_json(rl_file(args.name, "evidence.json"))
    print(f"{args.name}: {len(record['files'])} files from {record['folder']}")
    print(f"verdict: {evidence['verdict']['verdict']} (rule {evidence['verdict']['rule']})")
    print(f"report: {store.path(rl_file(args.name, 'report.md'))}")
    return 0
