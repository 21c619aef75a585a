"""ruff keeps the house (pyproject's [tool.ruff]; scripts/test.sh runs it before the suite): the package, tests,
scripts and benchmarks pass it, and it does fail on an unsorted import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUFF = Path(sys.executable).with_name("ruff")
TREES = ("apsft_dagster", "tests", "scripts", "benchmarks")


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUFF), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), *args],
                          cwd=ROOT, capture_output=True, text=True)


def test_the_house_passes_ruff():
    proc = _ruff(*TREES)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_fails_on_a_planted_unsorted_import(tmp_path):
    use = "\nprint(json, os, ApsftError)\n"
    sorted_ = "import json\nimport os\n\nfrom apsft_dagster.core.errors import ApsftError\n" + use
    unsorted = "from apsft_dagster.core.errors import ApsftError\nimport os\nimport json\n" + use
    (tmp_path / "tidy.py").write_text(sorted_)
    (tmp_path / "planted.py").write_text(unsorted)
    assert _ruff(str(tmp_path / "tidy.py")).returncode == 0
    proc = _ruff(str(tmp_path / "planted.py"))
    assert proc.returncode == 1 and "I001" in proc.stdout and "planted.py" in proc.stdout
