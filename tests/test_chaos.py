"""Kill anywhere, the bounded form (issue 37; benchmarks/chaos.py is the drawn one): three SIGKILLs
at fixed moments in three stages (just after a receipt of the evidence seal, of a Stage A table, of
the report), the same command run again after each. At every kill each receipt present matches its
artifact; the resumed run ends with every file byte-identical to README command 1's and leaves no
temp file, unfinished Dagster run or claimed pool slot. The same kill with the receipt written
before its data (the mutation a store could make) breaks the invariant, so the check can fail."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef

from apsft_dagster.core.layout import EVIDENCE_SEAL, eval_table, report_plot
from apsft_dagster.core.leftovers import dead_temps, receipt_problems
from apsft_dagster.core.paths import PROJECT_ROOT, store_instance
from apsft_dagster.core.store import Store
from apsft_dagster.run_recovery import unfinished

pytestmark = pytest.mark.after_the_run  # a copy of the run, processes of its own (tests/conftest.py)

# `apsft` with a SIGKILL of its own process right after the receipt named by CHAOS_KILL_AFTER is
# written; with CHAOS_RECEIPT_FIRST the store writes each receipt before its data (the mutation)
WRAPPER = """
import os, signal, sys
from apsft_dagster.core import store
after, write = os.environ.get("CHAOS_KILL_AFTER"), store.Store._write_receipt
def receipt(self, name, body):
    write(self, name, body)
    if name == after:
        os.kill(os.getpid(), signal.SIGKILL)
store.Store._write_receipt = receipt
if os.environ.get("CHAOS_RECEIPT_FIRST"):
    def put_bytes(self, name, data):
        digest = store.sha256_bytes(data)
        self._write_receipt(name, {"artifact": name, "bytes": len(data), "sha256": digest})
        store.write_atomic(self.path(name), data)
        return digest
    store.Store.put_bytes = put_bytes
from apsft_dagster.cli import main
sys.exit(main(sys.argv[1:]))
"""
FROM = "evidence_seal_job"  # the three stages lie after it; what lies before is kept, not rerun
KILLS = (EVIDENCE_SEAL, eval_table("base"), report_plot("accuracy"))


def _apsft(state: Path, store: Path, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("APSFT_PROFILE", "APSFT_CONFIG", "DAGSTER"))}
    environ.update(APSFT_STATE_DIR=str(state), **env)
    return subprocess.run([sys.executable, "-c", WRAPPER, "run", "--store", str(store), "--from", FROM],
                          cwd=PROJECT_ROOT, env=environ, capture_output=True, text=True, timeout=600)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "audits.duckdb"}


def _copy_without_the_three(cli_run, tmp_path) -> tuple[Store, Path]:
    _, source, _ = cli_run
    store = Store(tmp_path / "store")
    shutil.copytree(source.root, store.root)
    for name in KILLS:
        store.remove(name)
    return store, tmp_path / "state"


@pytest.mark.slow
def test_three_kills_in_three_stages_resume_to_command_ones_bytes(cli_run, tmp_path):
    store, state = _copy_without_the_three(cli_run, tmp_path)
    for name in KILLS:
        killed = _apsft(state, store.root, CHAOS_KILL_AFTER=name)
        assert killed.returncode == -9, f"no kill after {name}:\n{killed.stdout[-2000:]}{killed.stderr[-2000:]}"
        assert store.exists(name), name
        assert receipt_problems(store) == [], name
    done = _apsft(state, store.root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _files(store.root) == _files(cli_run[1].root)
    assert dead_temps(store.root) == [] and dead_temps(state) == []
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(store_instance(store.root, state))))
    try:
        assert unfinished(instance) == []
        failed = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
        assert len(failed) == len(KILLS)  # each killed run, marked failed by the next `apsft run`
    finally:
        instance.dispose()


@pytest.mark.slow
def test_a_receipt_written_before_its_data_is_caught_at_the_kill(cli_run, tmp_path):
    store, state = _copy_without_the_three(cli_run, tmp_path)
    killed = _apsft(state, store.root, CHAOS_KILL_AFTER=EVIDENCE_SEAL, CHAOS_RECEIPT_FIRST="1")
    assert killed.returncode == -9
    problems = receipt_problems(store)
    assert len(problems) == 1 and str(store.path(EVIDENCE_SEAL)) in problems[0], problems
