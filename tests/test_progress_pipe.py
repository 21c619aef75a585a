"""Progress that a log can see (issue 36): README command 1's `apsft run` (the `cli_run` fixture)
with stderr a pipe, not a terminal, read line by line while it runs. The trace bank's counted lines
(`[k/18] <task>: generated (traces ...)`, with the rate and time left) arrive while the process is
still running, the first and the last among them, and transformers' fallback warnings arrive as one
line of ours per model-holding stage process."""

import re

import pytest

from apsft_dagster.core.kernel_notice import FALLBACK, NOTICE

pytestmark = pytest.mark.slow
# the run's own process and at most one second-core helper for each step that shares its partitions
# (harvest, scoring, R1, Stage A and Stage B generations, training): one notice each at most
STAGE_PROCESSES = 1 + 6
COUNT = re.compile(r"^\s+trace_bank: \[(\d+)/(\d+)\] \S+: generated \(traces.*· .*/min, about .* left$")


def test_the_harvest_reports_its_tasks_through_a_pipe_while_it_runs(cli_run):
    proc, _, _ = cli_run
    lines = [line for line, _ in proc.live]
    live = [(int(found[1]), int(found[2]), running) for line, running in proc.live
            if (found := COUNT.match(line)) is not None]
    assert live and all(running for *_, running in live), "\n".join(lines)
    total = live[0][1]
    assert live[0][0] == 1 and live[-1][0] == total and 3 <= len(live) < total, live  # throttled, not every task
    assert FALLBACK not in "\n".join(lines)
    assert 1 <= sum(NOTICE in line for line in lines) <= STAGE_PROCESSES, [line for line in lines if NOTICE in line]
