"""The suite's input fuzzers (tests/test_fuzz_inputs.py, tests/test_fuzz_names.py) run longer.

Run: .venv/bin/python benchmarks/fuzz.py [EXAMPLES]   (default 3000 per reader; the suite runs 60)
Prints, per reader, the inputs tried, accepted and refused (by error class), the wall time, and
whether every input met the oracle (accepted while valid, or refused by the project's error
naming the file, nothing written). The seed is fixed, so a run is reproducible; a larger EXAMPLES
explores further along the same sequence.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ["tests/test_fuzz_inputs.py", "tests/test_fuzz_names.py", "tests/test_run_report_import_errors.py"]


def main(examples: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "tally.json"
        env = {**os.environ, "APSFT_FUZZ_EXAMPLES": str(examples), "APSFT_FUZZ_REPORT": str(report)}
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FILES],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        tally = json.loads(report.read_text()) if report.is_file() else {}
    print(f"fuzz: {examples} examples per reader (the suite: 60), {wall:.0f} s")
    print(f"{'reader':<24} {'tried':>7} {'accepted':>9}  refused")
    for reader, counts in sorted(tally.items()):
        refused = {k.removeprefix("refused: "): v for k, v in counts.items() if k.startswith("refused")}
        print(f"{reader:<24} {counts['tried']:>7} {counts.get('accepted', 0):>9}  "
              + ", ".join(f"{k} {v}" for k, v in sorted(refused.items())))
    print("every input met the oracle" if proc.returncode == 0 else proc.stdout[-4000:])
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000))
