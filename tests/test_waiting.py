"""Waiting is visible (issue 59): the line a wait prints (core/waiting.py), its timing on a fake clock,
the holder record, and a real run of a pooled asset whose slot another run holds (run_waiting.py)."""

import os
import socket
import subprocess
import threading
from datetime import datetime

import dagster as dg
import pytest

from apsft_dagster.core.waiting import (
    Holder,
    Waiting,
    elapsed,
    read_holder,
    record_holder,
    release_holder,
    waiting_line,
)

T0 = 1_800_000_000.0  # epoch seconds: a fixed moment for the fake clock


def hms(at: float) -> str:  # the wall clock as the test reads it, through datetime rather than time.strftime
    return datetime.fromtimestamp(at).isoformat()[11:19]


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_elapsed_reads_as_a_person_would_say_it():
    assert [elapsed(s) for s in (0, 35.9, 60, 270, 3599, 7500)] == \
        ["0 s", "35 s", "1 min 0 s", "4 min 30 s", "59 min 59 s", "2 h 5 min"]


def test_a_live_holder_is_named_with_its_run_profile_store_process_and_since():
    holder = Holder("1a2b3c4d-ffff", T0 - 270, "laptop", "/data/store", os.getpid(), socket.gethostname())
    assert waiting_line("the gpu slot", holder, T0 - 35, T0) == (
        f"waiting for the gpu slot held by run 1a2b3c4d (profile laptop, store /data/store, pid {os.getpid()}) "
        f"since {hms(T0 - 270)} (4 min 30 s); 35 s so far")


def test_a_holder_whose_process_is_gone_is_not_shown_as_holding():
    pid = _dead_pid()
    line = waiting_line("the gpu slot", Holder("deadbeef-0000", T0 - 600, "laptop", "/s", pid, socket.gethostname()),
                        T0 - 60, T0)
    assert "held by" not in line
    assert line == (f"waiting for the gpu slot: run deadbeef still claims it but its process (pid {pid}) is gone; "
                    "`apsft ui` or the next `apsft run` of its store frees the slot; 1 min 0 s so far")


def test_another_hosts_process_is_not_judged_from_here_and_says_where_it_runs():
    holder = Holder("abcdef012345", T0 - 30, None, None, _dead_pid(), "gpu-node-7")
    assert waiting_line("the gpu slot", holder, T0 - 5, T0) == (
        f"waiting for the gpu slot held by run abcdef01 (pid {holder.pid} on gpu-node-7) since {hms(T0 - 30)} (30 s); "
        "5 s so far")


def test_an_unknown_holder_and_a_wait_with_no_holder_say_only_what_is_known():
    assert waiting_line("the gpu slot", Holder("0123456789", T0 - 90), T0 - 90, T0) == \
        f"waiting for the gpu slot held by run 01234567 since {hms(T0 - 90)} (1 min 30 s); 1 min 30 s so far"
    assert waiting_line("a device from Ray", None, T0 - 31, T0) == \
        f"waiting for a device from Ray since {hms(T0 - 31)}; 31 s so far"


def test_the_first_line_comes_at_once_and_then_one_each_half_minute():
    wait = Waiting("the gpu slot", since=T0)
    said = {t: wait.tick(T0 + t) for t in (0, 1, 15, 29.9, 30, 31, 59.9, 60, 61, 95)}
    assert [t for t, line in said.items() if line] == [0, 30, 60, 95]
    assert said[0] == f"waiting for the gpu slot since {hms(T0)}; 0 s so far"
    assert said[95] == f"waiting for the gpu slot since {hms(T0)}; 1 min 35 s so far"
    assert wait.ended(T0 + 100) == "got the gpu slot after 1 min 40 s"
    assert Waiting("the gpu slot", T0).ended(T0 + 5) is None  # a wait never said ends in silence


def test_the_holder_record_reads_back_and_goes_with_its_run(tmp_path):
    holder = Holder("run-1", T0, "smoke", "/s", 4242, "host-a")
    path = record_holder(tmp_path / "holders", holder)
    assert path == tmp_path / "holders" / "run-1.json" and read_holder(tmp_path / "holders", "run-1") == holder
    assert list((tmp_path / "holders").iterdir()) == [path]  # no temp sibling left
    (tmp_path / "holders" / "run-2.json").write_text("{not json")
    assert read_holder(tmp_path / "holders", "run-2") is None and read_holder(tmp_path / "holders", "run-3") is None
    release_holder(tmp_path / "holders", "run-1")
    assert read_holder(tmp_path / "holders", "run-1") is None


@dg.asset(pool="gpu")
def pooled_step() -> None:
    pass


HOLDER_RUN = "feedc0de-1111-2222-3333-444455556666"


@pytest.fixture
def instance(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\nconcurrency:\n  pools:\n    default_limit: 1\n")
    with dg.DagsterInstance.from_config(str(home)) as inst:
        yield inst


def _hold_slot(instance) -> None:
    """A hand-made held slot: another run claims the gpu pool's one slot, its runner recorded."""
    from apsft_dagster.run_waiting import holders_folder

    storage = instance.event_log_storage
    storage.initialize_concurrency_limit_to_default("gpu")
    assert storage.claim_concurrency_slot("gpu", HOLDER_RUN, "trace_bank").is_claimed
    record_holder(holders_folder(instance), Holder(HOLDER_RUN, T0, "laptop", "/other/store", os.getpid(),
                                                   socket.gethostname()))


def test_pool_waits_names_the_run_holding_the_slot_from_its_record(instance):
    from apsft_dagster.run_waiting import pool_waits

    _hold_slot(instance)
    assert pool_waits(instance, "waiter") == []  # not waiting yet
    assert not instance.event_log_storage.claim_concurrency_slot("gpu", "waiter", "score_bank").is_claimed
    [(pool, step, since, holder)] = pool_waits(instance, "waiter")
    assert (pool, step, holder.run_id, holder.profile, holder.store, holder.pid) == \
        ("gpu", "score_bank", HOLDER_RUN, "laptop", "/other/store", os.getpid())
    assert abs(holder.since - since) < 5 and holder.since != T0  # since: when it took the slot, not its run's start


def test_a_run_waiting_for_the_slot_says_so_at_once_then_says_when_it_got_it(instance, capfd):
    """Through the runner's own `_execute`: the pooled step waits while the hand-made holder keeps
    the slot (2 s), its first line comes within a second or two, and the run log carries it too."""
    from apsft_dagster.run_waiting import holders_folder
    from apsft_dagster.runner import _execute

    _hold_slot(instance)
    defs = dg.Definitions(assets=[pooled_step], jobs=[dg.define_asset_job("pooled_job", selection=[pooled_step])])
    storage = instance.event_log_storage
    freed = threading.Timer(2.5, storage.free_concurrency_slot_for_step, (HOLDER_RUN, "trace_bank"))
    freed.start()
    try:
        run_id = _execute(defs, "pooled_job", instance, {}, False)
    finally:
        freed.cancel()
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.SUCCESS
    err = capfd.readouterr().err
    first = f"  pooled_step: waiting for the gpu slot held by run feedc0de (profile laptop, store /other/store, " \
            f"pid {os.getpid()}) since "
    assert first in err and "  pooled_step: got the gpu slot after " in err, err
    so_far = err.split(first)[1].splitlines()[0].rsplit("; ", 1)[1]
    assert so_far in ("0 s so far", "1 s so far", "2 s so far"), err  # at once, not after half a minute
    logged = [e.message for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)]
    assert any(m.startswith("pooled_step: waiting for the gpu slot held by run feedc0de") for m in logged), logged
    assert not (holders_folder(instance) / f"{run_id}.json").exists()  # its own record goes with the run
