"""`apsft audit [NAME]`: run the SQL audits of every system over the store, print them, keep them."""

from __future__ import annotations

import argparse
import sys
import time

from apsft_dagster.cli.args import profile_arguments, profile_store


def add_parser(sub) -> None:
    p = sub.add_parser("audit", help="run the SQL audits in dbt_like_sql/ and print them")
    profile_arguments(p)
    p.add_argument("name", nargs="?", help="one audit (a dbt_like_sql/ file name without .sql)")
    p.set_defaults(handler=audit)


def audit(args: argparse.Namespace) -> int:
    """Run the SQL audits over the store, print them, and keep them in audits.duckdb."""
    import polars as pl

    from apsft_dagster.core.audits import discover, persist, run_audit
    from apsft_dagster.core.errors import MissingArtifactError

    _, store = profile_store(args)
    audits = discover()
    chosen = [a for a in audits if args.name in (None, a.name)]
    if not chosen:
        print(f"apsft: no audit {args.name!r}; known: {', '.join(a.name for a in audits)}", file=sys.stderr)
        return 2
    results, started = {}, time.perf_counter()
    with pl.Config(tbl_rows=200, tbl_cols=20, tbl_width_chars=160, tbl_hide_dataframe_shape=True):
        for a in chosen:
            try:
                began = time.perf_counter()
                results[a.name] = run_audit(a, store)
                took = time.perf_counter() - began
            except MissingArtifactError as exc:
                if args.name:  # asked for by name: its missing input is an error
                    raise
                print(f"\n== {a.name}: skipped ({exc})")
                continue
            print(f"\n== {a.name} ({a.path.name}, {took * 1000:.0f} ms): {a.description}\n{results[a.name]}")
    kept = persist(store, results)
    print(f"\n{len(results)} audits in {time.perf_counter() - started:.2f} s (run, printed and kept in {kept})")
    return 0
