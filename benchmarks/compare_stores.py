"""Two stores file by file: how many receipts and files are byte-identical, and which differ.

Issue 36's receipts comparisons (a shipped-model run against one that built its model, a quiet
run against one beside a busy core) read two `benchmarks/fresh_clone.sh` stores with this. The
DuckDB audit database (`audits.duckdb`) differs between any two runs: its file holds page layout,
not only the seven tables (docs/timings.md).

Run: .venv/bin/python benchmarks/compare_stores.py STORE_A STORE_B
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path


def digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1])
        return 2
    a, b = (digests(Path(x)) for x in argv)
    for kind, keep in (("receipts", lambda k: k.endswith(".receipt.json")), ("files", lambda k: True)):
        one, two = {k for k in a if keep(k)}, {k for k in b if keep(k)}
        differ = sorted(k for k in one & two if a[k] != b[k])
        print(f"{kind}: {len(one)} vs {len(two)}; identical {len(one & two) - len(differ)}; differ {differ}; "
              f"only one side {sorted(one ^ two)[:10]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
