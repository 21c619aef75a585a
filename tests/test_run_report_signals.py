"""The hack-signal registry (built-ins, a profile's pick, `module:function` and installed entry points,
the errors), the math signals on hand-labelled rollouts (tests/fixtures/rl_math) and the post-run
filter on the source run's fixture (tests/fixtures/rl_run: hacked per saved step 0/4, 1/2, 2/3, 5/6)."""

from __future__ import annotations

import json
import shutil
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest

from apsft_dagster.core.errors import ConfigError
from apsft_dagster.core.run_report import HackThresholds, hack_signals, load_run, signal_registry
from apsft_dagster.core.run_report.post_filter import export_filtered, filter_rollouts
from apsft_dagster.core.run_report.registry import register
from apsft_dagster.core.run_report.samples import sample_table
from apsft_dagster.core.run_report.schema import Rollouts, Sample
from apsft_dagster.core.run_report.signal_registry import CHAT, SignalResult, resolve
from apsft_dagster.core.store import Store, sha256_bytes

FIXTURE = Path(__file__).parent / "fixtures" / "rl_run"
MATH = Path(__file__).parent / "fixtures" / "rl_math" / "rollouts_step_10.json"
HERE = Path(__file__).stem  # this module, importable by name: its functions are `module:function` entries


# --- signals a team might write (entries `test_run_report_signals:<name>`) -------------------------

def boxed_twice(sample, thresholds) -> SignalResult:
    boxes = sample.completion.count("\\boxed{")
    return SignalResult(boxes > 1, {"boxes": boxes})


def returns_dict(sample, thresholds):
    return {"fired": True}


def raises(sample, thresholds):
    raise KeyError("no such field")


NOT_CALLABLE = 3


@pytest.fixture(scope="module")
def math_doc() -> Rollouts:
    return Rollouts.model_validate_json(MATH.read_text())


# --- the registry -------------------------------------------------------------------------------

def test_builtins_are_registered_and_the_chat_set_is_hack_signals():
    assert list(signal_registry.BUILTIN) == ["repeated_greetings", "phrase_repetition", "sign_off_spam",
                                             "repeated_lines", "repeated_ngram", "over_word_limit", "unfaithful",
                                             "format_only", "length_gaming"]
    assert CHAT.names == tuple(list(signal_registry.BUILTIN)[:7])
    run = load_run(FIXTURE)
    for doc in run.rollouts.values():
        for s in doc.samples:
            assert CHAT.summary(s, HackThresholds()) == hack_signals(s.completion, prompt=s.prompt)


def test_a_module_function_entry_runs_beside_built_ins(math_doc):
    chosen = resolve(["format_only", f"{HERE}:boxed_twice"], profile="p")
    twice = Sample(problem_id=1, prompt="", completion="\\boxed{1} or \\boxed{2}", reward=1.0)
    summary = chosen.summary(twice, HackThresholds())
    assert summary["reasons"] == ["format_only", f"{HERE}:boxed_twice"] and summary["boxes"] == 2
    table = sample_table("m", SimpleNamespace(rollouts={10: math_doc}), HackThresholds(), chosen)
    assert table.columns[-2:] == ["format_only", f"{HERE}:boxed_twice"]
    assert table["format_only"].to_list() == [p in (2, 3, 4, 5, 9) for p in range(1, 11)]


def test_an_installed_entry_point_is_found_by_name(monkeypatch):
    point = metadata.EntryPoint(name="team_boxes", value=f"{HERE}:boxed_twice", group="apsft.hack_signals")
    monkeypatch.setattr(signal_registry, "installed", lambda: {"team_boxes": point})
    assert resolve(["team_boxes"]).functions == (boxed_twice,)


@pytest.mark.parametrize(("entry", "says"), [
    ("no_such_signal", "no hack signal named 'no_such_signal'; built-in: ["),
    ("no_such_module_d61:f", "cannot import module 'no_such_module_d61'"),
    (f"{HERE}:missing", "has no 'missing'; define `def missing(sample, thresholds) -> SignalResult`"),
    (f"{HERE}:returns_dict", "returned a dict, not a SignalResult on a probe sample; return SignalResult("),
    (f"{HERE}:raises", "raised KeyError: 'no such field' on a probe sample"),
    (f"{HERE}:NOT_CALLABLE", "is a int, not a function"),
    ("not a name!", "not a signal name nor `package.module:function`"),
])
def test_a_bad_entry_is_a_config_error_naming_profile_entry_and_fix(entry, says):
    with pytest.raises(ConfigError) as caught:
        resolve([entry], profile="team")
    assert f"profile team: run_report.signals entry {entry!r}: " in str(caught.value) and says in str(caught.value)


def test_the_profile_picks_the_signals(tmp_path):
    from apsft_dagster.core.config import load_config
    from conftest import variant_config

    smoke = load_config("smoke")
    assert smoke.run_report.signals == list(CHAT.names) and smoke.digest.startswith("313ee1a8bc18")
    path = variant_config(tmp_path, lambda raw: raw["run_report"].update(signals=["format_only", "unfaithful"]))
    picked = signal_registry.selected_signals(load_config(None, str(path)))
    assert picked.names == ("format_only", "unfaithful")
    path = variant_config(tmp_path, lambda raw: raw["run_report"].update(signals=["format_only", "format_only"]))
    with pytest.raises(ConfigError, match=r"profile smoke: run_report.signals lists \['format_only'\] more than once"):
        signal_registry.selected_signals(load_config(None, str(path)))


# --- the math signals on hand-labelled rollouts ---------------------------------------------------

def test_format_only_matches_the_hand_labels(math_doc):
    format_only = signal_registry.BUILTIN["format_only"]
    fired = {s.problem_id for s in math_doc.samples if format_only(s, HackThresholds()).fired}
    assert fired == {2, 3, 4, 5, 9}  # tests/fixtures/rl_math/README.md's table
    by_id = {s.problem_id: s for s in math_doc.samples}
    measure = format_only(by_id[8], HackThresholds()).measure
    assert measure["answer_format"] == "boxed" and measure["answer"] == "\\frac{3}{4}"
    assert format_only(by_id[9], HackThresholds()).measure == {"answer_format": "answer_line", "answer": "12",
                                                               "work_words": 3}
    lenient = HackThresholds(format_only_numeric_answer=False, format_only_min_work_words=0)
    assert {s.problem_id for s in math_doc.samples if format_only(s, lenient).fired} == {4}  # only the empty answer


def test_length_gaming_fires_on_rewarded_long_completions():
    long = Sample(problem_id=1, prompt="", completion="step " * 1001, reward=1.0)
    signal = signal_registry.BUILTIN["length_gaming"]
    assert signal(long, HackThresholds()) == SignalResult(True, {"word_count": 1001})
    assert not signal(long.model_copy(update={"reward": 0.0}), HackThresholds()).fired
    assert not signal(long, HackThresholds(length_max_words=1001)).fired


# --- the post-run filter ------------------------------------------------------------------------

# the fixture's hacked samples and their signals, read off its texts (tests/test_run_report.py's HACKED,
# plus the seed's two after-samples 330/256 and 350/711, which also invent content: unfaithful)
DROPPED = {"repeated_greetings": 1, "phrase_repetition": 1, "sign_off_spam": 1, "repeated_lines": 1,
           "repeated_ngram": 2, "over_word_limit": 2, "unfaithful": 3}
KEPT = [(0, 256), (0, 711), (0, 102), (0, 415), (330, 530), (350, 640), (390, 805)]  # in file order


@pytest.fixture()
def registered(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(FIXTURE, folder)
    store = Store(tmp_path / "store")
    register(store, "r1", folder)
    return store, folder


def test_filter_counts_and_export_match_the_hand_count(registered, tmp_path, capsys):
    from apsft_dagster.cli import main

    store, _ = registered
    assert main(["rl-report", "filter", "r1", "--store", str(store.root)]) == 0
    counts = store.get_json("run_report/r1/filter.json")
    assert (counts["samples"], counts["kept"], counts["dropped"]) == (15, 7, 8)  # 0+1+2+5 hacked of 4+2+3+6
    assert counts["dropped_by_signal"] == DROPPED and counts["signals"] == list(DROPPED)
    assert "15 samples, 7 kept, 8 dropped" in capsys.readouterr().out
    data = store.get_bytes("run_report/r1/filtered.jsonl")
    rows = [json.loads(line) for line in data.decode().splitlines()]
    assert [(r["step"], r["problem_id"]) for r in rows] == KEPT and list(rows[0]) == [
        "step", "problem_id", "prompt", "completion", "reward"]
    assert counts["export_sha256"] == sha256_bytes(data)
    out = tmp_path / "elsewhere" / "kept.jsonl"  # the same export again, to a file: identical bytes
    assert main(["rl-report", "filter", "r1", "--store", str(store.root), "--out", str(out)]) == 0
    assert out.read_bytes() == data and json.loads((out.parent / "filter.json").read_text())["dropped"] == 8


def test_filter_keeps_what_format_only_does_not_flag(math_doc):
    data, counts = filter_rollouts(SimpleNamespace(rollouts={10: math_doc}), resolve(["format_only"]),
                                   HackThresholds())
    assert [json.loads(line)["problem_id"] for line in data.decode().splitlines()] == [1, 6, 7, 8, 10]
    assert counts["dropped_by_signal"] == {"format_only": 5} and counts["kept"] == 5


def test_filter_of_a_run_without_rollouts_says_so_and_writes_nothing(registered, capsys):
    from apsft_dagster.cli import main

    store, folder = registered
    for path in folder.glob("rollouts_step_*.json"):
        path.unlink()
    register(store, "bare", folder)
    before = sorted(p.name for p in store.path("run_report/bare").iterdir())
    assert main(["rl-report", "filter", "bare", "--store", str(store.root)]) == 1
    assert "saved no rollout samples" in capsys.readouterr().err
    assert sorted(p.name for p in store.path("run_report/bare").iterdir()) == before
    assert export_filtered(store, "bare", CHAT, HackThresholds()) is None


def test_validate_resolves_the_picked_signals_and_names_a_bad_entry(tmp_path, capsys):
    from apsft_dagster.cli import main
    from conftest import variant_config

    good = variant_config(tmp_path, lambda raw: raw["run_report"].update(signals=["format_only", "unfaithful"]))
    assert main(["validate", "--config", str(good)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "  run_report.signals: format_only, unfaithful"
    bad = variant_config(tmp_path, lambda raw: raw["run_report"].update(signals=["no_such_pkg_xyz.signals:tic"]))
    assert main(["validate", "--config", str(bad)]) != 0
    assert "run_report.signals entry 'no_such_pkg_xyz.signals:tic': cannot import module" in capsys.readouterr().err
