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


def test_long_waits_read_in_minutes(monkeypatch):
    clock = iter([0.0, 600.0])
    monkeypatch.setattr(common.time, "perf_counter", lambda: next(clock))
    assert common.Pace(total=4).step(worked=True) == " · 0.1/min, about 30 min left"


def test_the_run_summary_reports_the_store_size(tmp_path):
    from apsft_dagster.experiment.cli.presentation import _size

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
