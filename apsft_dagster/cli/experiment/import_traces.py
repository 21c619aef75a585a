"""`apsft import-traces FILE`: traces sampled elsewhere (vLLM, a harness) into the store's trace bank
(docs/import-traces.md)."""

from __future__ import annotations

import argparse

from apsft_dagster.cli.args import profile_arguments, profile_store


def add_parser(sub) -> None:
    p = sub.add_parser("import-traces", help="import traces sampled elsewhere into the trace bank")
    p.add_argument("file", metavar="FILE", help="JSONL or Parquet: task_id | prompt, completion | text | output "
                                                "[, finish_reason]")
    profile_arguments(p)
    p.set_defaults(handler=import_traces)


def import_traces(args: argparse.Namespace) -> int:
    """Judge the file's traces as the harvest judges its own and write their shards and keys."""
    from apsft_dagster.core.paths import store_root
    from apsft_dagster.core.trace_import_store import import_traces as run_import

    config, store = profile_store(args)
    location = args.store or str(store_root(config.profile))
    done = run_import(args.file, config, store, location)
    kept = f" ({len(done['kept'])} already there, kept)" if done["kept"] else ""
    print(f"imported {done['tasks']} tasks{kept}: {done['traces']} traces, {done['eligible']} eligible, "
          f"{len(done['excluded'])} tasks excluded{': ' + ', '.join(done['excluded']) if done['excluded'] else ''}")
    print(f"  from {done['file']} (SHA-256 {done['sha256']}) into {location}")
    print(f"  null in the bank (not in the file): {', '.join(done['missing'])}")
    print(f"  recomputed with the profile's tokenizer: {', '.join(done['recomputed'])}")
    left = done["to_harvest"]
    print(f"  the harvest makes the other {len(left)} train tasks' shards" if left else
          "  every train task has its shard: the trace_bank stage generates nothing")
    print(f"next: apsft run --profile {config.profile} --store {location}")
    return 0
