"""The repository stands on its own: the protocol is in it, and nothing points outside the clone."""

import re
import subprocess

import pytest

from apsft_dagster.core.paths import PROJECT_ROOT


def _tracked() -> list[str]:
    return subprocess.run(["git", "ls-files"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          check=True).stdout.split()


def test_no_tracked_file_points_outside_the_clone():
    offenders = []
    for name in _tracked():
        path = PROJECT_ROOT / name
        if path.suffix in {".py", ".md", ".yaml", ".sql", ".toml", ".sh"} or name == ".ci/run":
            text = path.read_text(errors="replace")
            if ".." + "/shared" in text or re.search(r"\bSPEC" + r"\.md\b", text):
                offenders.append(name)
    assert offenders == []


def test_readme_links_the_protocol_and_it_covers_every_stage():
    readme = (PROJECT_ROOT / "README.md").read_text()
    assert "(docs/PROTOCOL.md)" in readme
    protocol = (PROJECT_ROOT / "docs" / "PROTOCOL.md").read_text()
    for stage in ("Harvest", "Scoring and the parity gate", "R1 labels", "Evidence seal", "Selection: six arms",
                  "Training", "Merge and deployment probe", "Stage A evaluation", "Stage B"):
        assert re.search(rf"^## \d+\. {re.escape(stage)}", protocol, re.M), stage


@pytest.mark.slow
def test_setup_says_what_it_does_and_is_idempotent():
    """Rerun in this checkout: every line it prints is a `setup:` step, and it ends ready or up to date."""
    proc = subprocess.run(["bash", "scripts/setup.sh", "test"], cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines and all(line.startswith("setup: ") for line in lines), lines
    assert "up to date" in lines[-1] or "ready" in lines[-1]
    if "ready" in lines[-1]:  # it had to install: now the stamp must make a rerun skip pip
        again = subprocess.run(["bash", "scripts/setup.sh", "test"], cwd=PROJECT_ROOT, capture_output=True, text=True)
        assert "is up to date" in again.stdout
