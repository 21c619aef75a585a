"""Progress that a log can see (issue 36): `apsft run` with stderr a pipe, not a terminal, read line
by line while the harvest runs. The trace bank's counted lines (`[k/18] <task>: generated (traces ...)`,
with the rate and time left) arrive while the process is still running, the first and the last
among them, and transformers' fallback warnings arrive as one line of ours per stage process."""

import os
import re
import subprocess
import sys

import pytest

from apsft_dagster.core.kernel_notice import FALLBACK, NOTICE

pytestmark = pytest.mark.slow
COUNT = re.compile(r"^\s+trace_bank: \[(\d+)/(\d+)\] \S+: generated \(traces.*· .*/min, about .* left$")


def test_the_harvest_reports_its_tasks_through_a_pipe_while_it_runs(tmp_path):
    env = {**os.environ, "APSFT_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.Popen([sys.executable, "-m", "apsft_dagster.cli", "run", "--to", "trace_bank_job"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    live, lines = [], []
    for line in proc.stderr:
        lines.append(line.rstrip("\n"))
        if (found := COUNT.match(lines[-1])) is not None:
            live.append((int(found[1]), int(found[2]), proc.poll() is None))
    assert proc.wait(timeout=600) == 0, "\n".join(lines)
    assert live and all(running for *_, running in live), "\n".join(lines)
    total = live[0][1]
    assert live[0][0] == 1 and live[-1][0] == total and 3 <= len(live) < total, live  # throttled, not every task
    assert FALLBACK not in "\n".join(lines)
    assert 1 <= sum(NOTICE in line for line in lines) <= 2  # once per model-holding stage process at most
