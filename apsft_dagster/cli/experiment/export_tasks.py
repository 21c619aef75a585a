"""`apsft export-tasks --out FILE`: a profile's tasks written as a task file (docs/task-files.md)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from apsft_dagster.cli.args import profile_arguments


def add_parser(sub) -> None:
    p = sub.add_parser("export-tasks", help="write the profile's tasks as a task file (.jsonl or .parquet)")
    profile_arguments(p, store=False)
    p.add_argument("--out", required=True, help="the task file to write: FILE.jsonl or FILE.parquet")
    p.set_defaults(handler=export_tasks)


def export_tasks(args: argparse.Namespace) -> int:
    """Write the tasks and print the two lines that make a profile read them."""
    from apsft_dagster.core.config import load_config
    from apsft_dagster.core.task_file.export import export_tasks as export

    config = load_config(args.profile, args.config)
    rows, digest = export(config, Path(args.out))
    print(f"wrote {rows} tasks of profile {config.profile} to {args.out}")
    print("tasks:  # in a profile (source: relative to the profile file, or absolute)")
    print(f"  source: {os.path.abspath(args.out)}")
    print(f"  source_sha256: {digest}")
    return 0
