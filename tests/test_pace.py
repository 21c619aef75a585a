"""The rate and time left that every per-task loop and the training loop log (core/progress.Pace)."""

from apsft_dagster.core import progress as common


def test_pace_counts_only_items_that_did_work(monkeypatch):
    clock = iter([100.0, 100.0, 101.0, 131.0, 161.0])  # start; kept at once; then 30 s per item
    monkeypatch.setattr(common.time, "perf_counter", lambda: next(clock))
    pace = common.Pace(total=5)
    assert pace.step(worked=False) == ""  # nothing made yet: no rate to show
    pace.step(worked=False)
    assert pace.step(worked=True) == " · 2.0/min, about 60 s left"  # 2 left at 30 s each
    assert pace.step(worked=True) == " · 2.0/min, about 30 s left"


def test_a_step_sharing_with_its_helper_counts_what_nobody_claimed_at_both_paces(monkeypatch):
    clock = iter([0.0, 30.0])  # one item in 30 s; 5 unclaimed of 10, the step and its helper at work
    monkeypatch.setattr(common.time, "perf_counter", lambda: next(clock))
    assert common.Pace(total=10).step(True, left=5, hands=2) == " · 4.0/min, about 75 s left"  # 5 x 15 s


def test_long_waits_read_in_minutes(monkeypatch):
    clock = iter([0.0, 600.0])
    monkeypatch.setattr(common.time, "perf_counter", lambda: next(clock))
    assert common.Pace(total=4).step(worked=True) == " · 0.1/min, about 30 min left"


def test_the_run_summary_reports_the_store_size(tmp_path):
    from apsft_dagster.cli.experiment.presentation import _size

    (tmp_path / "bank").mkdir()
    (tmp_path / "bank" / "a.parquet").write_bytes(b"x" * 2**20)
    (tmp_path / "b.json").write_bytes(b"y" * 2**19)
    assert _size(str(tmp_path)) == " (2 files, 1.5 MiB)"
    assert _size("s3://bucket/prefix") == "" and _size(str(tmp_path / "absent")) == ""


def test_paced_step_lines_carry_a_rate_timed_from_the_loop_start(monkeypatch):
    clock = iter([0.0, 10.0, 40.0, 70.0, 80.0])
    monkeypatch.setattr(common.time, "perf_counter", lambda: next(clock))
    said = []
    say = common.paced(said.append)  # created at 0 s
    say("pretraining 1,000 parameters")  # 10 s: the loop starts here
    say("step 100/400 loss 1.2")  # 100 steps in 30 s
    say("step 200/400 loss 0.9")  # 200 in 60 s
    say("saved")  # 80 s: not a step line, passed on as it is
    assert said == ["pretraining 1,000 parameters", "step 100/400 loss 1.2 · 200.0 steps/min, about 2 min left",
                    "step 200/400 loss 0.9 · 200.0 steps/min, about 60 s left", "saved"]


def test_a_log_gets_the_first_and_last_count_each_tenth_and_one_each_half_minute(monkeypatch):
    """Throttle, against the rule written out by hand: of 100 counted lines 3 s apart, the first, the
    ten that start a new tenth (10, 20, ... 100, the last among them) and none for the time rule
    (a tenth is 30 s); of 10 lines 90 s apart, every one (each over half a minute after the last)."""
    now = [0.0]
    monkeypatch.setattr(common.time, "perf_counter", lambda: now[0])
    throttle, shown = common.Throttle(), []
    for done in range(1, 101):
        now[0] = 3.0 * done
        if throttle.due(f"step {done}/100 loss 1.0"):
            shown.append(done)
    assert shown == [1, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    slow = common.Throttle()
    seen = []
    for done in range(1, 11):
        now[0] = 1000.0 + 90.0 * done
        seen.append(slow.due(f"[{done}/1000] task-{done}: made"))
    assert all(seen)


def test_a_quiet_stretch_longer_than_half_a_minute_is_broken_by_the_next_count(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(common.time, "perf_counter", lambda: now[0])
    throttle = common.Throttle()
    assert throttle.due("[1/1000] a: made")  # the first
    now[0] = 29.0
    assert not throttle.due("[2/1000] b: made")  # same tenth, under half a minute
    now[0] = 31.0
    assert throttle.due("[3/1000] c: made")  # half a minute since the last line shown
    assert throttle.due("pretraining 886,144 parameters")  # not a count: always
    assert throttle.due("[1-400/1000] 400 kept (verified): a .. z")  # a range counts its last: a new tenth


def test_counted_lines_carry_the_rate_and_time_left(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(common.time, "perf_counter", lambda: now[0])
    lines = []
    progress = common.counted("stage_a base", lines.append)
    now[0] = 30.0
    progress(1, 4)  # 30 s an item, 3 left
    now[0] = 40.0
    progress(2, 4)  # 20 s an item now, 2 left; a new tenth, so shown
    assert lines == ["[1/4] stage_a base · 2.0/min, about 2 min left", "[2/4] stage_a base · 3.0/min, about 40 s left"]


def test_a_pulse_waits_its_half_minute_and_goes_only_where_a_stage_listens(monkeypatch):
    """A decoding batch's pulse (core/progress.Pulse): none before the batch has run `every` seconds,
    then at most one each `every`; only inside `pulsing`, whose end restores the listener before it."""
    clock = [100.0]
    monkeypatch.setattr(common.time, "perf_counter", lambda: clock[0])
    pulse, outer, inner = common.Pulse(18, 12_288), [], []

    def at(seconds: float, step: int, open_rows: int) -> None:
        clock[0] = 100.0 + seconds
        pulse(step, open_rows)
    with common.pulsing(outer.append):
        at(1.0, 1, 18)
        at(29.9, 300, 18)  # not yet half a minute
        at(30.0, 301, 5)
        with common.pulsing(inner.append):
            at(45.0, 450, 5)  # 15 s after the last line
            at(61.0, 2_048, 1)
        at(95.0, 4_096, 1)
    at(200.0, 9_000, 1)  # no stage listening: nowhere to go
    assert outer == ["decoding 18 rows: step 301/12,288, 5 open", "decoding 18 rows: step 4,096/12,288, 1 open"]
    assert inner == ["decoding 18 rows: step 2,048/12,288, 1 open"]
