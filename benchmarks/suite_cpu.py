"""Where the suite's CPU goes: each test's core-seconds, its own process's and its reaped children's
(subprocesses: `apsft run`, code servers, nested pytest), as a pytest plugin, and the table by file.

    CPU_LOG_DIR=/tmp/cpu PYTHONPATH=benchmarks .venv/bin/python -m pytest -q -n auto --dist loadgroup -p suite_cpu
    .venv/bin/python benchmarks/suite_cpu.py /tmp/cpu [ROWS]

A session fixture is charged to the first test that asks for it (the run to `cli_run`'s first reader);
a child reaped later than its test (a daemon) is charged to the test that reaps it."""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def pytest_configure(config):
    if not os.environ.get("CPU_LOG_DIR"):  # loaded with -p suite_cpu but told nowhere to write
        raise pytest.UsageError("suite_cpu: set CPU_LOG_DIR to the folder each worker's JSON lines go to")
    Path(os.environ["CPU_LOG_DIR"]).mkdir(parents=True, exist_ok=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    own, kids, wall = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.monotonic()
    yield
    row = {"id": item.nodeid, "self": _cpu(resource.RUSAGE_SELF) - own,
           "children": _cpu(resource.RUSAGE_CHILDREN) - kids, "wall": time.monotonic() - wall}
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(Path(os.environ["CPU_LOG_DIR"]) / f"{worker}.jsonl", "a") as fh:
        fh.write(json.dumps(row) + "\n")


def report(folder: Path, rows_shown: int = 30) -> str:
    rows = [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines()]
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for row in rows:
        total = by_file[row["id"].split("::")[0]]
        total[0] += row["self"]
        total[1] += row["children"]
        total[2] += row["wall"]
        total[3] += 1
    own, kids = sum(r["self"] for r in rows), sum(r["children"] for r in rows)
    lines = [f"{len(rows)} tests: {own + kids:.0f} core-s ({own:.0f} in the test processes, {kids:.0f} in children)",
             "core-s    own  children  wall-s  tests  file"]
    for name, (o, c, w, n) in sorted(by_file.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:rows_shown]:
        lines.append(f"{o + c:6.1f} {o:6.1f} {c:9.1f} {w:7.1f} {n:6d}  {name}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 30))
