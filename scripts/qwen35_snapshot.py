"""Build the tiny trained snapshot on Qwen3.5's real vocabulary that `full_cpu` (the dry run of `full`) loads.

The smoke recipe on Qwen3.5's real tokenizer and its 248,320 embedding rows (core/qwen35/snapshot.py),
built once per content key in the model cache (about 5 minutes on 2 cores the first time), then copied.

Usage: python scripts/qwen35_snapshot.py [--out DIR] [--architecture qwen3_5|qwen3]
       (default DIR: full_cpu's model.path, .apsft/qwen35_snapshot/<architecture>)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from apsft_dagster.core.paths import PROJECT_ROOT
    from apsft_dagster.core.qwen35.snapshot import build_snapshot

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--architecture", default="qwen3_5", choices=("qwen3_5", "qwen3"))
    parser.add_argument("--out", help="the snapshot folder (replaced whole)")
    args = parser.parse_args(argv)
    out = Path(args.out or PROJECT_ROOT / ".apsft" / "qwen35_snapshot" / args.architecture)
    report = build_snapshot(out, args.architecture, log=lambda m: print(f"qwen35_snapshot: {m}", flush=True))
    print(f"qwen35_snapshot: {out} ({report['cache']}; close rate {report.get('greedy_close_rate')}, "
          f"greedy accuracy {report.get('greedy_accuracy')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
