"""`apsft rl-report add NAME FOLDER`: register an RL run's artifact folder as run NAME (a partition)
and write its report now (what the inbox sensor does when a folder is dropped into the inbox).
`apsft rl-report filter NAME [--out FILE]`: export the registered run's rollouts that no selected hack
signal flags, with the counts dropped per signal (core/run_report/post_filter.py)."""

from __future__ import annotations

import argparse
import sys

from apsft_dagster.cli.args import export_choice, profile_arguments, profile_store, store_location


def add_parser(sub) -> None:
    p = sub.add_parser("rl-report", help="the RL run report with a reward-hacking audit: register a run folder "
                                         "and report on it, or export its unflagged rollouts")
    p.add_argument("action", choices=("add", "filter"))
    p.add_argument("name", help="run id (letters, digits, '.', '_', '-')")
    p.add_argument("folder", nargs="?",
                   help="add: the run's artifact folder (its files' shapes: docs/rl-run-report.md)")
    p.add_argument("--out", help="filter: the JSON-lines file to write (filter.json beside it); default: the store's "
                                 "run_report/<run>/filtered.jsonl")
    profile_arguments(p)
    p.set_defaults(handler=rl_report)


def rl_report(args: argparse.Namespace) -> int:
    from apsft_dagster.core.names import check_name
    from apsft_dagster.core.run_report import RunReportError

    check_name(args.name, "run", RunReportError)  # the cheapest mistake is named first
    if args.action == "filter":
        if args.folder is not None:
            raise RunReportError(f"rl-report filter {args.name}: takes no folder (got {args.folder}); the run is read "
                                 "from its registration")
        return rl_filter(args)
    if args.folder is None or args.out is not None:
        raise RunReportError("rl-report add NAME FOLDER: give the run's folder" if args.folder is None else
                             "rl-report add: --out is for `rl-report filter`")
    return rl_add(args)


def rl_add(args: argparse.Namespace) -> int:
    from apsft_dagster.core.run_report import load_run
    from apsft_dagster.core.run_report.names import rl_file
    from apsft_dagster.core.run_report.registry import register
    from apsft_dagster.core.run_report.signal_registry import selected_signals
    from apsft_dagster.run_report.partitions import RL_RUN
    from apsft_dagster.run_report.stages import RUN_REPORT_STAGES
    from apsft_dagster.runner import run_wing_partition

    config, store = profile_store(args)
    selected_signals(config)  # a profile without the section, or with a bad signal, is refused before any write
    chosen = export_choice(args)
    load_run(args.folder)  # a malformed folder is refused here, naming the file and field, before anything is written
    record = register(store, args.name, args.folder)
    if not run_wing_partition(RUN_REPORT_STAGES, RL_RUN, args.name, chosen, store_location(chosen, config)):
        return 1
    evidence = store.get_json(rl_file(args.name, "evidence.json"))
    print(f"{args.name}: {len(record['files'])} files from {record['folder']}")
    print(f"verdict: {evidence['verdict']['verdict']} (rule {evidence['verdict']['rule']})")
    print(f"report: {store.path(rl_file(args.name, 'report.md'))}")
    return 0


def rl_filter(args: argparse.Namespace) -> int:
    from apsft_dagster.core.run_report.post_filter import export_filtered
    from apsft_dagster.core.run_report.settings import run_report_settings
    from apsft_dagster.core.run_report.signal_registry import selected_signals

    config, store = profile_store(args)
    signals = selected_signals(config)
    summary = export_filtered(store, args.name, signals, run_report_settings(config).thresholds, args.out)
    if summary is None:
        print(f"apsft: run {args.name} saved no rollout samples (no rollouts_step_<N>.json), so there is nothing to "
              "filter; nothing was written", file=sys.stderr)
        return 1
    print(f"{args.name}: {summary['samples']} samples, {summary['kept']} kept, {summary['dropped']} dropped "
          f"by {len(signals.names)} signal(s)")
    for name, n in summary["dropped_by_signal"].items():
        print(f"  {name}: {n} dropped")
    print(f"kept: {summary['export_path']}")
    print(f"counts: {summary['counts_path']}")
    return 0
