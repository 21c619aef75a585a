"""The Dagster UI's partition pages over a finished store, in a real browser (issue 25, item 5).

For each task- and policy-partitioned asset: seconds from opening `/assets/<asset>?view=partitions`
until the page shows `Materialized (N)` for all N of its partitions and `Failed (0)`, `Missing (0)`;
then how many partition rows the page lists with a green (materialized) dot. Also the seconds
until the webserver answers. Target: every page in under 10 s at 360 partitions.

Run: .venv/bin/python benchmarks/bench_ui_partitions.py --profile laptop --state DIR --store DIR
(the state folder and store of a finished `apsft run`; needs chromium and chromedriver, as the UI test)
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

ASSETS = ("trace_bank", "score_bank", "r1_labels", "adapters", "merged_models", "stage_a_generations")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="smoke")
    parser.add_argument("--state", required=True, help="the run's APSFT_STATE_DIR (the store's instance is under it)")
    parser.add_argument("--store", required=True)
    args = parser.parse_args()
    os.environ.update(APSFT_PROFILE=args.profile)
    from apsft_dagster.definitions import defs
    from browser import Page, chromium, served_ui

    started = time.perf_counter()
    with chromium() as driver, served_ui(Path(args.state), store=args.store, profile=args.profile) as (port, _):
        print(f"webserver answering after {time.perf_counter() - started:.1f} s")
        page = Page(driver, port, Path(tempfile.mkdtemp()))
        print("| asset | partitions | page complete | rows listed (green) |\n|---|---|---|---|")
        for asset in ASSETS:
            keys = defs.resolve_assets_def(asset).partitions_def.get_partition_keys()
            began = time.perf_counter()
            page.open(f"/assets/{asset}?view=partitions")
            counts = {f"Materialized ({len(keys)})", "Failed (0)", "Missing (0)"}
            shown = counts <= page.lines(counts)
            took = time.perf_counter() - began
            listed = "//div[@data-tooltip][following-sibling::div[1][contains(@style, 'border-radius')]]"
            dots = page.read(f"{listed}/following-sibling::div[1]", attribute="style")
            green = sum(bool(re.search(r"--color-accent-green", d)) for d in dots)
            print(f"| {asset} | {len(keys)} | {f'{took:.1f} s' if shown else 'NOT SHOWN'} | {len(dots)} ({green}) |",
                  flush=True)
            page.screenshot(f"{asset}_partitions")


if __name__ == "__main__":
    main()
