"""The review points (issue 58, item 5): `apsft run --pause-after seal|selection` (or the profile's
`review.pause_after`) stops after the point and records the pause; a later run past it refuses until
`apsft run --resume [--by NAME]` records who resumed and when."""

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apsft_dagster.core import review
from apsft_dagster.core.config import POINTS
from apsft_dagster.core.errors import ApsftError, ReviewError
from apsft_dagster.core.layout import REVIEW_LOG
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.store import Store, sha256_bytes
from apsft_dagster.experiment.stages import REVIEW_POINTS, STAGES
from fuzzing import fuzz_settings, judge, mutated_bytes, mutated_document

ORDER = [s.job for s in STAGES]
SEAL, SELECTION = REVIEW_POINTS["seal"], REVIEW_POINTS["selection"]


def _between(first: str, last: str) -> list[str]:
    return ORDER[ORDER.index(first):ORDER.index(last) + 1]


def test_the_points_are_the_seal_and_the_last_stage_of_selection():
    assert set(REVIEW_POINTS) == set(POINTS)
    assert SEAL == "evidence_seal_job"
    assert ORDER[ORDER.index(SELECTION) + 1] == "adapters_job"  # selection ends where training starts
    assert ORDER.index("sft_arms_job") < ORDER.index(SELECTION)


def test_a_run_is_cut_after_the_first_point_asked_and_not_cut_again_once_paused():
    everything = list(ORDER)
    assert review.plan([], ORDER, everything, REVIEW_POINTS, [], False) == (everything, None)
    assert review.plan([], ORDER, everything, REVIEW_POINTS, ["selection", "seal"], False) == (
        ORDER[:ORDER.index(SEAL) + 1], "seal")
    late = _between("sft_arms_job", "adapters_job")
    assert review.plan([], ORDER, late, REVIEW_POINTS, ["seal", "selection"], False) == (late[:-1], "selection")
    early = _between("tasks_and_model_job", "score_bank_job")  # does not reach the point: runs whole
    assert review.plan([], ORDER, early, REVIEW_POINTS, ["seal"], False) == (early, None)
    paused = [{"event": "pause", "point": "seal", "profile": "smoke", "at": "t"}]
    resumed = [*paused, {"event": "resume", "point": "seal", "profile": "smoke", "at": "u", "by": "ann"}]
    assert review.plan(resumed, ORDER, everything, REVIEW_POINTS, ["seal"], False) == (everything, None)
    assert review.plan(paused, ORDER, everything, REVIEW_POINTS, ["seal", "selection"], True) == (
        ORDER[:ORDER.index(SELECTION) + 1], "selection")


def test_a_run_past_an_open_pause_is_refused_up_to_it_is_not():
    paused = [{"event": "pause", "point": "seal", "profile": "smoke", "at": "2026-12-01T09:00:00+00:00"}]
    with pytest.raises(ReviewError, match=r"paused for review after the evidence seal.*sft_arms_job must wait.*"
                                          r"apsft run --resume"):
        review.plan(paused, ORDER, ["sft_arms_job"], REVIEW_POINTS, [], False)
    upto = _between("score_bank_job", SEAL)
    assert review.plan(paused, ORDER, upto, REVIEW_POINTS, ["seal"], False) == (upto, None)


def test_pause_and_resume_are_chained_records_with_who_and_when(tmp_path):
    store = Store(tmp_path)
    pause = review.record(store, "pause", "seal", "smoke", at="2026-12-01T09:00:00+00:00")
    with pytest.raises(ReviewError, match="profile smoke, and this run is profile laptop"):
        review.resume(store, "laptop", "ann")
    with pytest.raises(ReviewError, match="pass --by NAME"):
        review.resume(store, "smoke", "  ")
    assert review.read_reviews(store) == [pause]  # the refusals wrote nothing
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    resumed = review.resume(store, "smoke", "ann")
    lines = (tmp_path / REVIEW_LOG).read_bytes().splitlines(keepends=True)
    assert resumed["prev_sha256"] == sha256_bytes(lines[0]) and pause["prev_sha256"] == "0" * 64
    assert (resumed["event"], resumed["point"], resumed["by"], resumed["seq"]) == ("resume", "seal", "ann", 2)
    assert before <= dt.datetime.fromisoformat(resumed["at"]) <= dt.datetime.now(dt.UTC)
    assert review.read_reviews(store) == [pause, resumed]
    with pytest.raises(ReviewError, match="no open review pause"):
        review.resume(store, "smoke", "ann")


def test_an_edited_review_log_is_refused_by_line(tmp_path):
    store = Store(tmp_path)
    review.record(store, "pause", "seal", "smoke")
    review.resume(store, "smoke", "ann")
    lines = (tmp_path / REVIEW_LOG).read_bytes().splitlines(keepends=True)
    forged = lines[0].replace(b'"smoke"', b'"laptop"') + lines[1]
    store.put_bytes(REVIEW_LOG, forged)  # a fresh receipt: only the chain can tell
    with pytest.raises(ReviewError, match=r"line 2: out of sequence or chain broken"):
        review.read_reviews(store)
    store.put_bytes(REVIEW_LOG, lines[0].replace(b'"seal"', b'"training"'))
    with pytest.raises(ReviewError, match=r"line 1: field 'point'"):
        review.read_reviews(store)


def test_the_profile_key_pauses_as_the_flag_does_and_by_goes_with_resume(tmp_path):
    import argparse

    from apsft_dagster.cli.experiment.review_point import before_run
    from apsft_dagster.core.config import load_config
    from conftest import variant_config

    config = load_config(path=variant_config(tmp_path, lambda raw: raw.update(review={"pause_after": ["selection"]})))
    assert config.digest == load_config("smoke").digest  # outside the digest: no receipt moves
    args = argparse.Namespace(pause_after=None, resume=False, by=None)
    stages, pause = before_run(args, config, str(tmp_path / "store"), list(STAGES))
    assert ([s.job for s in stages], pause) == (ORDER[:ORDER.index(SELECTION) + 1], "selection")
    with pytest.raises(ReviewError, match="use it with --resume"):
        before_run(argparse.Namespace(pause_after=None, resume=False, by="ann"), config, str(tmp_path / "store"),
                   list(STAGES))
    assert not (tmp_path / "store").exists()  # checks write nothing


def _apsft(store, state, *args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APSFT_PROFILE", "APSFT_CONFIG", "DAGSTER"))}
    env.update(APSFT_STATE_DIR=str(state), USER="reviewer", APSFT_SECOND_CORE="off")  # the other core: the suite
    return subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "run", "--store", str(store), *args],
                          cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.after_the_run
def test_a_real_run_pauses_after_the_seal_refuses_past_it_and_resumes(cli_run, tmp_path):
    _, source, _ = cli_run
    store, state = tmp_path / "store", tmp_path / "state"
    shutil.copytree(source.root, store)
    paused = _apsft(store, state, "--from", SEAL, "--pause-after", "seal")
    assert paused.returncode == 0, paused.stdout[-2000:] + paused.stderr[-2000:]
    ran = [line.split()[0] for line in paused.stdout.splitlines() if line.startswith("  ") and "_job " in line]
    assert ran == [SEAL] and "paused for review after the evidence seal" in paused.stdout
    [pause] = review.read_reviews(Store(store))
    assert (pause["event"], pause["point"], pause["profile"]) == ("pause", "seal", "smoke")
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    refused = _apsft(store, state, "--from", "sft_arms_job", "--to", "sft_arms_job")
    assert refused.returncode == 2 and "sft_arms_job must wait" in refused.stderr
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before  # nothing written
    resumed = _apsft(store, state, "--resume", "--from", "sft_arms_job", "--to", "sft_arms_job")
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert "resumed after the evidence seal by reviewer" in resumed.stdout
    events = [json.loads(line) for line in (store / REVIEW_LOG).read_text().splitlines()]
    assert [(e["event"], e.get("by")) for e in events] == [("pause", None), ("resume", "reviewer")]
    assert pause["at"] <= events[1]["at"]


@fuzz_settings()
@given(data=st.data())
def test_a_hand_edited_review_log_is_read_or_refused_by_name_and_writes_nothing(data):
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "store")
        review.record(store, "pause", "seal", "smoke", at="2026-12-01T09:00:00+00:00")
        review.resume(store, "smoke", "ann", at="2026-12-01T10:00:00+00:00")
        review.record(store, "pause", "selection", "smoke", at="2026-12-01T11:00:00+00:00")
        original = store.get_bytes(REVIEW_LOG).splitlines(keepends=True)
        lines, i = list(original), data.draw(st.integers(0, len(original) - 1))
        how = data.draw(st.sampled_from(["bytes", "document", "drop"]))
        if how == "drop":
            del lines[i]
        else:
            old = lines[i].rstrip(b"\n")
            lines[i] = data.draw(mutated_bytes(old) if how == "bytes" else mutated_document(json.loads(old))) + b"\n"
        store.put_bytes(REVIEW_LOG, b"".join(lines))  # edited by hand, with its receipt redone
        before = {p: p.read_bytes() for p in Path(tmp).rglob("*") if p.is_file()}
        accepted = judge("review log", lambda: review.read_reviews(store), (ApsftError,), [REVIEW_LOG])
        assert not (accepted and i < len(original) - 1 and lines[i] != original[i]), "an edited line was accepted"
        assert {p: p.read_bytes() for p in Path(tmp).rglob("*") if p.is_file()} == before
