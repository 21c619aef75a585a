"""`apsft validate`: load a profile, say it is valid and print its digest (no Dagster, no torch)."""

from __future__ import annotations

import argparse

from apsft_dagster.cli.args import profile_arguments
from apsft_dagster.core.config import load_config
from apsft_dagster.core.rehearsal import declared


def add_parser(sub) -> None:
    p = sub.add_parser("validate", help="validate a profile and print its digest")
    profile_arguments(p, store=False)
    p.set_defaults(handler=validate)


def validate(args: argparse.Namespace) -> int:
    config = load_config(args.profile, args.config)
    print(f"{config.profile}: valid, digest {config.digest}")
    if config.rehearsal:
        print(f"  {declared(config)}")
    if config.run_report is not None:  # each picked hack signal imported and tried on a probe sample
        from apsft_dagster.core.run_report.signal_registry import selected_signals

        print(f"  run_report.signals: {', '.join(selected_signals(config).names)}")
    return 0
