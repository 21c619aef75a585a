"""The suite's worker layout holds (scripts/test.sh: `-n auto --dist loadgroup`): tests marked by a
conftest hook with `xdist_group` run on one worker, so a session fixture they share is built once.
pytest 9.2 broke this silently (xdist 3.8 sets `item._nodeid`, which 9.2 no longer reads: the smoke
run was built twice, 140 s each), hence the pin in pyproject.toml and this test."""

import os
import subprocess
import sys
import textwrap

import pytest

CONFTEST = """
import os, pytest

@pytest.fixture(scope="session")
def shared():
    return os.environ["PYTEST_XDIST_WORKER"]

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "shared" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("shared"))
"""
TESTS = """
def test_a(shared): print("worker", shared)
def test_b(shared): print("worker", shared)
def test_c(shared): print("worker", shared)
def test_d(): pass
def test_e(): pass
"""


@pytest.mark.slow
def test_a_conftest_group_keeps_its_tests_on_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_grouped.py").write_text(textwrap.dedent(TESTS))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
                           "-v", "-s", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:]
    grouped = [line for line in proc.stdout.splitlines() if "PASSED" in line and "@shared" in line]
    assert len(grouped) == 3, proc.stdout  # the group's name joins the node id: xdist saw the marker
    assert len({line.split("]")[0] for line in grouped}) == 1, grouped  # one worker ran all three


def test_a_suite_process_holds_one_torch_thread():
    """conftest.py pins one thread before torch loads (a worker per core; more would stall each other)."""
    import torch

    assert os.environ["OMP_NUM_THREADS"] == "1" and torch.get_num_threads() == 1
