"""`apsft report`: where the experiment report is, and the verdict it states."""

from __future__ import annotations

import argparse
import sys

from apsft_dagster.cli.args import profile_arguments, profile_store
from apsft_dagster.cli.experiment.presentation import verdict_line


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="print the experiment report's path and its verdict")
    profile_arguments(p)
    p.set_defaults(handler=report)


def report(args: argparse.Namespace) -> int:
    """Where the experiment report is, and the verdict it states."""
    from apsft_dagster.core.layout import REPORT_MARKDOWN

    _, store = profile_store(args)
    if not store.exists(REPORT_MARKDOWN):
        print(f"apsft: no report yet in {store.root}; run `apsft run` (or `apsft run --from stage_a_analysis_job`)",
              file=sys.stderr)
        return 2
    store.verify(REPORT_MARKDOWN)
    print(f"verdict: {verdict_line(store)}")
    print(f"report: {store.path(REPORT_MARKDOWN)}")
    return 0
