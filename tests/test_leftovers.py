"""What a killed process leaves (issue 37): temp siblings of dead processes are found and swept,
a live process's are left; a receipt without its artifact is named; a run's processes, read from
the pids its events logged, are gone when dead, zombies or reused."""

import json
import os
import subprocess
import time

import dagster as dg
from dagster._core.events import EngineEventData
from dagster._core.storage.tags import GRPC_INFO_TAG

from apsft_dagster.core.leftovers import dead_temps, receipt_problems, sweep
from apsft_dagster.core.store import Store
from apsft_dagster.run_recovery import processes_gone


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_only_a_dead_processes_temp_siblings_are_swept(tmp_path):
    store = Store(tmp_path)
    store.put_bytes("a/x.json", b"{}")
    dead = _dead_pid()
    stale_file = tmp_path / "a" / f".y.json.tmp-{dead}"
    stale_dir = tmp_path / f".adapter.tmp-{dead}"
    old_dir = tmp_path / "a" / f".adapter.old-{dead}"
    mine = tmp_path / "a" / f".z.json.tmp-{os.getpid()}"
    for path in (stale_file, mine):
        path.write_bytes(b"half")
    for path in (stale_dir, old_dir):
        (path / "inner").mkdir(parents=True)
        (path / "inner" / f".w.tmp-{dead}").write_bytes(b"")  # inside a temp folder: goes with it
    assert dead_temps(tmp_path) == sorted([stale_file, stale_dir, old_dir])
    assert sweep(tmp_path) == sorted([stale_file, stale_dir, old_dir])
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(["a", "x.json", "x.json.receipt.json", mine.name])


def test_a_receipt_without_its_artifact_or_with_other_bytes_is_named(tmp_path):
    store = Store(tmp_path)
    store.put_bytes("kept.json", b"1")
    store.put_bytes("changed.json", b"2")
    assert receipt_problems(store) == []
    (tmp_path / "changed.json").write_bytes(b"3")
    (tmp_path / "orphan.json.receipt.json").write_text(json.dumps({"artifact": "orphan.json", "sha256": "0" * 64}))
    problems = receipt_problems(store)
    assert len(problems) == 2
    assert str(tmp_path / "changed.json") in problems[0] and str(tmp_path / "orphan.json") in problems[1]


def _empty_job():
    return dg.Definitions(jobs=[dg.JobDefinition(graph_def=dg.GraphDefinition(name="empty"))]).resolve_job_def("empty")


def _ui_run(instance, pid: int) -> dg.DagsterRun:
    """A run as a local code server launches it, whose event log names `pid` as its worker."""
    run = instance.create_run_for_job(_empty_job(), status=dg.DagsterRunStatus.STARTED,
                                      tags={GRPC_INFO_TAG: json.dumps({"host": "localhost", "socket": "/tmp/s"})})
    instance.report_engine_event("Started process for run", run, EngineEventData.in_process(pid))
    return run


def test_a_ui_runs_processes_are_gone_when_dead_a_zombie_or_reused(monkeypatch):
    with dg.DagsterInstance.ephemeral() as instance:
        assert processes_gone(instance, _ui_run(instance, os.getpid())) is False  # this process: alive
        assert processes_gone(instance, _ui_run(instance, _dead_pid())) is True
        child = subprocess.Popen(["sleep", "30"])
        try:
            run = _ui_run(instance, child.pid)
            assert processes_gone(instance, run) is False
            child.kill()
            time.sleep(0.2)  # killed, not yet reaped: a zombie
            assert processes_gone(instance, run) is True
        finally:
            child.kill()
            child.wait()
        later = subprocess.Popen(["sleep", "30"])  # its pid logged ten seconds before it started: a reuse
        try:
            real = time.time
            with monkeypatch.context() as m:
                m.setattr(time, "time", lambda: real() - 10)
                run = _ui_run(instance, later.pid)
            assert processes_gone(instance, run) is True
        finally:
            later.kill()
            later.wait()
        unknown = instance.create_run_for_job(_empty_job(), status=dg.DagsterRunStatus.STARTED)
        assert processes_gone(instance, unknown) is None  # neither a code server's tag nor the runner's
