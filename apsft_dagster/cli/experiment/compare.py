"""`apsft compare STORE_A STORE_B [--out DIR]`: two finished experiments side by side (docs/compare.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_OUT = "apsft-compare"  # under the current folder


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="two finished experiment stores side by side: config differences, banks, "
                                       "selection, accuracies, margins, verdicts")
    p.add_argument("store_a", metavar="STORE_A", help="a finished experiment store (the folder `apsft run` wrote)")
    p.add_argument("store_b", metavar="STORE_B", help="the store to set beside it (any profile)")
    p.add_argument("--out", default=DEFAULT_OUT,
                   help=f"folder for compare.md and accuracy.png (default: ./{DEFAULT_OUT})")
    p.set_defaults(handler=compare)


def compare(args: argparse.Namespace) -> int:
    """Print the comparison, then write its Markdown report and plot under --out."""
    from apsft_dagster.core.compare import compare_stores
    from apsft_dagster.core.compare_report import MARKDOWN, PLOT, accuracy_plot, markdown, text
    from apsft_dagster.core.errors import CompareError
    from apsft_dagster.core.store import write_atomic

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CompareError(f"--out {out}: a file, not a folder; name a folder (it is made if missing). "
                                   "Nothing was written")
    doc = compare_stores(args.store_a, args.store_b)
    files = {out / MARKDOWN: markdown(doc).encode(), out / PLOT: accuracy_plot(doc)}  # everything made, then written
    print(text(doc))
    for path, data in files.items():
        write_atomic(path, data)
    print(f"report: {out / MARKDOWN}")
    print(f"plot: {out / PLOT}")
    return 0
