"""`apsft export-bank --out DIR`: the trace bank as an inheritable bank (index.json + shards)."""

from __future__ import annotations

import argparse
import os

from apsft_dagster.cli.args import profile_arguments, profile_store


def add_parser(sub) -> None:
    p = sub.add_parser("export-bank", help="export the trace bank as an inheritable bank")
    profile_arguments(p)
    p.add_argument("--out", required=True, help="folder to write index.json and shards/ into")
    p.set_defaults(handler=export_bank)


def export_bank(args: argparse.Namespace) -> int:
    """Write the trace bank as an inheritable bank (index.json + shards) and print its digest."""
    from apsft_dagster.core.bank import export_bank as export
    from apsft_dagster.core.bank import stored_tasks
    from apsft_dagster.core.layout import TRACE_BANK
    from apsft_dagster.core.task_file.source import train_task_ids

    config, store = profile_store(args)
    task_ids = stored_tasks(store, TRACE_BANK, train_task_ids(config))
    digest = export(store, TRACE_BANK, task_ids, args.out)
    print(f"exported {len(task_ids)} task shards to {args.out}")
    print(f"harvest.inherited_index: {os.path.abspath(args.out)}/index.json")
    print(f"harvest.inherited_index_sha256: {digest}")
    return 0
