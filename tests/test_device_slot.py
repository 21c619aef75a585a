"""The machine's device slot (core/device_slot.py): one engine on the GPU at a time across stores, the
wait said with its holder, freed when the holder dies; and where `apsft run` takes it (cli/experiment/gpu_guard.py)."""

import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from datetime import datetime

import dagster as dg
import pytest

from apsft_dagster.cli.experiment.gpu_guard import gpu_guard, holds_device
from apsft_dagster.core.config import Ray, load_config
from apsft_dagster.core.device_slot import LOCK, RECORD, current_holder, device_slot
from apsft_dagster.core.waiting import Holder
from apsft_dagster.runner import run_stages
from apsft_dagster.stage import Stage
from apsft_dagster.workers.cluster import RUN_ENV

T0 = 1_800_000_000.0
HOLD = """
import os, sys
from apsft_dagster.core.device_slot import device_slot
from apsft_dagster.core.waiting import Holder
with device_slot(sys.argv[1], Holder("first", 0.0, "alpha", "/stores/a", os.getpid(), None, "trace_bank_job"), print):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes it (or kills this process)
"""


def hms(at: float) -> str:
    return datetime.fromtimestamp(at).isoformat()[11:19]


def holder(stage: str = "score_bank_job") -> Holder:
    return Holder("second", 0.0, "beta", "/stores/b", os.getpid(), socket.gethostname(), stage)


def first_holder(state) -> subprocess.Popen:
    """Another process holding the slot (its holder record naming it), once it says so."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(state)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def lock_is_free(state) -> bool:
    fd = os.open(state / LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_second_process_waits_names_the_holder_and_gets_the_slot_when_it_exits(tmp_path):
    first = first_holder(tmp_path)
    said, got = [], threading.Event()

    def second():
        with device_slot(tmp_path, holder(), said.append, poll=0.05) as held:
            assert current_holder(tmp_path) == held  # its own record now
            got.set()

    thread = threading.Thread(target=second)
    thread.start()
    try:
        for _ in range(200):  # the line comes at once: within a poll or two
            if said:
                break
            threading.Event().wait(0.01)
        assert not got.is_set() and len(said) == 1
        line = said[0]
        assert line.startswith(f"waiting for the GPU held by stage trace_bank_job (profile alpha, store /stores/a, "
                               f"pid {first.pid}) since ")
        assert line.endswith("; 0 s so far")
    finally:
        first.stdin.close()  # the first run's stage ends
        first.wait(timeout=30)
    thread.join(timeout=30)
    assert got.is_set() and said[-1].startswith("got the GPU after ")
    assert not (tmp_path / RECORD).exists() and lock_is_free(tmp_path)  # released with its record


def test_a_holder_killed_with_sigkill_frees_the_slot_at_once(tmp_path):
    first = first_holder(tmp_path)
    assert current_holder(tmp_path).pid == first.pid and not lock_is_free(tmp_path)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert (tmp_path / RECORD).exists() and current_holder(tmp_path) is None  # its record stays, read as gone
    said = []
    with device_slot(tmp_path, holder(), said.append, poll=60.0,
                     sleep=lambda s: pytest.fail("the slot of a killed holder must be free at once")):
        assert current_holder(tmp_path).pid == os.getpid()
    assert said == []  # no wait, nothing said


def test_the_wait_is_said_at_once_then_each_half_minute_on_a_fake_clock(tmp_path):
    other = os.open(tmp_path / LOCK, os.O_RDWR | os.O_CREAT)  # another holder: its own open file, its own lock
    fcntl.flock(other, fcntl.LOCK_EX)
    (tmp_path / RECORD).write_text('{"run_id": "x", "since": %r, "profile": "alpha", "store": "/stores/a", '
                                   '"pid": %d, "host": null, "stage": "adapters_job"}' % (T0 - 600, os.getpid()))
    now, said = [T0], []

    def sleep(seconds):
        now[0] += seconds
        if now[0] >= T0 + 65:
            os.close(other)  # the holder's process ends its stage

    with device_slot(tmp_path, holder(), said.append, poll=5.0, clock=lambda: now[0], sleep=sleep) as held:
        assert held.since == T0 + 65 and held.stage == "score_bank_job"
    who = f"stage adapters_job (profile alpha, store /stores/a, pid {os.getpid()}) since {hms(T0 - 600)}"
    assert said == [f"waiting for the GPU held by {who} (10 min 0 s); 0 s so far",
                    f"waiting for the GPU held by {who} (10 min 30 s); 30 s so far",
                    f"waiting for the GPU held by {who} (11 min 0 s); 1 min 0 s so far",
                    "got the GPU after 1 min 5 s"]


def stage(job: str, engine: bool) -> Stage:
    return Stage(job, (), engine=engine)


def test_only_engine_stages_on_cuda_off_ray_hold_the_device(monkeypatch):
    monkeypatch.delenv(RUN_ENV, raising=False)
    cpu = load_config("smoke")
    cuda = cpu.model_copy(update={"compute": cpu.compute.model_copy(update={"device": "cuda"})})
    engine, plain = stage("trace_bank_job", True), stage("evidence_seal_job", False)
    assert [holds_device(c, s) for c in (cpu, cuda) for s in (engine, plain)] == [False, False, True, False]
    assert not holds_device(cuda.model_copy(update={"ray": Ray(enabled=True)}), engine)  # the profile's ray section
    assert holds_device(cuda.model_copy(update={"ray": Ray(enabled=False)}), engine)
    monkeypatch.setenv(RUN_ENV, "local")  # `apsft run --ray`: Ray's placement decides
    assert not holds_device(cuda, engine)


def test_the_guard_takes_the_lock_on_cuda_only(monkeypatch, tmp_path):
    monkeypatch.delenv(RUN_ENV, raising=False)
    cpu = load_config("smoke")
    cuda = cpu.model_copy(update={"compute": cpu.compute.model_copy(update={"device": "cuda"})})
    with gpu_guard(cpu, "/stores/a", tmp_path)(stage("trace_bank_job", True)):
        assert list(tmp_path.iterdir()) == []  # a CPU run: no lock file, no record
    with gpu_guard(cuda, "/stores/a", tmp_path)(stage("evidence_seal_job", False)):
        assert list(tmp_path.iterdir()) == []
    with gpu_guard(cuda, "/stores/a", tmp_path)(stage("trace_bank_job", True)):
        assert not lock_is_free(tmp_path)
        recorded = current_holder(tmp_path)
        assert (recorded.stage, recorded.profile, recorded.store, recorded.pid) == (
            "trace_bank_job", "smoke", "/stores/a", os.getpid())
    assert lock_is_free(tmp_path) and not (tmp_path / RECORD).exists()


def test_the_runner_holds_the_guard_around_a_stages_runs_and_not_around_a_stage_with_none():
    events = []

    @dg.asset
    def made():
        events.append("ran")

    @dg.asset(partitions_def=dg.DynamicPartitionsDefinition(name="nothing"))
    def none_yet():
        events.append("never")

    defs = dg.Definitions(assets=[made, none_yet], jobs=[dg.define_asset_job("made_job", [made]),
                                                         dg.define_asset_job("none_job", [none_yet])])

    @contextmanager
    def guard(s: Stage):
        events.append(f"enter {s.job}")
        yield
        events.append(f"exit {s.job}")

    stages = [Stage("made_job", (made,), engine=True), Stage("none_job", (none_yet,), keys_at_run=lambda d: [])]
    outcomes = run_stages(defs, dg.DagsterInstance.ephemeral(), stages, alert=False, guard=guard)
    assert [o.ok for o in outcomes] == [True, True] and outcomes[1].skipped
    assert events == ["enter made_job", "ran", "exit made_job"]
