"""`apsft`: run a profile end to end, open the UI, or validate a config; each wing adds its commands.

  apsft run | export-bank | import-traces | export-arms | freeze | amend | report | compare | export-tasks
                                                the experiment (cli/experiment/)
  apsft loss-mask add | run | demo              the loss-mask curation (cli/loss_mask.py)
  apsft rl-report add | filter                  the RL run report (cli/run_report.py)
  apsft ui | validate | plan | doctor | audit   shared (cli/)
"""

from __future__ import annotations

import argparse
import functools
import sys

from apsft_dagster.cli import audit, doctor, plan, ui, validate
from apsft_dagster.cli import loss_mask as loss_mask_cli
from apsft_dagster.cli import run_report as run_report_cli
from apsft_dagster.cli.experiment import (
    amend,
    compare,
    export_arms,
    export_bank,
    export_tasks,
    freeze,
    import_traces,
    report,
    run,
)
from apsft_dagster.core.errors import ApsftError

# in the order `apsft --help` lists them
COMMANDS = (run, ui, validate, plan, doctor, export_bank, import_traces, export_arms, freeze, amend, audit, report,
            compare, export_tasks, loss_mask_cli, run_report_cli)


@functools.cache
def parser() -> argparse.ArgumentParser:
    """The command line, built once per process (parsing never changes it)."""
    top = argparse.ArgumentParser(prog="apsft", description="run a profile end to end, open the UI, or validate a "
                                                            "config")
    sub = top.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for stream in (sys.stdout, sys.stderr):  # `apsft run | tee log` shows each line as it happens
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    try:
        return args.handler(args)
    except ApsftError as exc:
        print(f"apsft: error: {exc}", file=sys.stderr)
        return 2
