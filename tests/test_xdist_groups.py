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


PIPELINE_TESTS = """
import os, pytest

def _ran(name):
    with open(os.environ["ORDER_FILE"], "a") as fh:
        fh.write(f"{os.environ['PYTEST_XDIST_WORKER']} {name}\\n")

@pytest.fixture(scope="session")
def smoke_run(): return None

@pytest.fixture(scope="session")
def cli_run(): return None

def test_q1(): _ran("plain")
def test_q2(): _ran("plain")
@pytest.mark.slow
def test_s1(): _ran("slow")
def test_q3(): _ran("plain")
def test_c1(cli_run): _ran("run")
def test_m1(smoke_run): _ran("run")
def test_m2(smoke_run, cli_run): _ran("run")
def test_c2(cli_run): _ran("run")
@pytest.mark.after_the_run
def test_late1(cli_run): _ran("late")
@pytest.mark.after_the_run
def test_late2(smoke_run): _ran("late")
"""


@pytest.mark.slow
def test_one_worker_starts_on_the_run_and_the_other_on_the_slow_tests(tmp_path):
    """The suite's conftest (its hooks, copied) puts every reader of README command 1's run first,
    as one group, and the other slow tests next, in collection order: one worker starts the run
    (about 150 s on this machine) and reads it, the other starts on the slow tests, and neither
    waits behind quick tests; readers marked `after_the_run` (a copy of the run, a minute or more of
    their own) are not in the group: whichever worker is free takes them, after the slow tests."""
    from pathlib import Path

    here = Path(__file__).parent / "conftest.py"
    (tmp_path / "conftest.py").write_text(here.read_text().replace("sys.path.insert(0, str(Path(__file__).parent))",
                                                                   "sys.path.insert(0, %r)" % str(here.parent)))
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n    after_the_run: late\n")
    (tmp_path / "test_pipelines.py").write_text(textwrap.dedent(PIPELINE_TESTS))
    order = tmp_path / "order.txt"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
                           "-v", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "ORDER_FILE": str(order), "APSFT_GC_FREEZE": "off"})  # loads no model
    assert proc.returncode == 0, proc.stdout[-2000:]
    ran = [line.split() for line in order.read_text().splitlines()]
    first = {worker: name for worker, name in reversed(ran)}
    assert sorted(first.values()) == ["run", "slow"], ran
    assert len({w for w, n in ran if n == "run"}) == 1, ran  # the run's four readers on one worker
    # `after_the_run` readers leave the group: each worker takes them after its slow tests, before quick ones
    late = [line for line in proc.stdout.splitlines() if "PASSED" in line and "test_late" in line]
    assert len(late) == 2 and not any("@cli_run" in line for line in late), proc.stdout
    for worker in {w for w, _ in ran}:
        kinds = [n for w, n in ran if w == worker and n != "run"]
        assert kinds == sorted(kinds, key=["slow", "late", "plain"].index), ran
