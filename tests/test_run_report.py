"""RL run report and reward-hacking audit, on the source run's fixture (tests/fixtures/rl_run).

Expected figures are copied by hand from the source run's report (kept outside this repository);
each literal names the seed table it comes from.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from apsft_dagster.core.run_report import (
    HackThresholds,
    RunReportError,
    best_checkpoints,
    build_report,
    cost_table,
    eval_table,
    hack_rates,
    hack_signals,
    load_run,
    matched_pairs,
    verdict,
)

FIXTURE = Path(__file__).parent / "fixtures" / "rl_run"


@pytest.fixture(scope="module")
def run():
    return load_run(FIXTURE)


def copy_run(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(FIXTURE, folder)
    return folder


def edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def samples(run, step: int) -> dict[int, object]:
    return {s.problem_id: s for s in run.rollouts[step].samples}


# --- tables and choices ------------------------------------------------------------------------

def test_eval_table_reproduces_the_seed_rows(run):
    rows = {r["step"]: r for r in eval_table(run)}
    assert list(rows) == [0, 50, 100, 150, 200, 250, 300, 350, 400]  # seed "Eval Scores": Step column
    # seed "Eval Scores", rows 0 and 400: (mix p50, v02 strict, v03 strict, train reward mean)
    assert rows[0]["scores"] == {"mix_p50_avg1": 0.4680, "v02_strict_avg1": -0.0320, "v03_strict_avg1": -0.3140}
    assert rows[0]["train_reward"] == 0.3663
    assert rows[400]["scores"] == {"mix_p50_avg1": 0.7093, "v02_strict_avg1": 0.4387, "v03_strict_avg1": 0.1244}
    assert rows[400]["train_reward"] is None  # the seed's train reward cell at step 400 is empty


def test_best_mix_is_step_350_and_best_strict_is_step_400(run):
    best = {b["metric"]: b for b in best_checkpoints(run)}
    # by eye over seed "Eval Scores": mix peaks at 0.7171 (step 350); v02 at 0.4387, v03 at 0.1244 (step 400)
    assert (best["mix_p50_avg1"]["step"], best["mix_p50_avg1"]["value"]) == (350, 0.7171)
    assert (best["v02_strict_avg1"]["step"], best["v02_strict_avg1"]["value"]) == (400, 0.4387)
    assert (best["v03_strict_avg1"]["step"], best["v03_strict_avg1"]["value"]) == (400, 0.1244)
    # seed "Result": best mix adapter/checkpoint and best final strict adapter/checkpoint
    assert best["mix_p50_avg1"]["adapter_id"] == "v8bin4fqkl5glsfe9h7g8vr0"
    assert best["mix_p50_avg1"]["checkpoint_id"] == "ibgt0c5n1fqhv3502mg2f8kr"
    assert best["v02_strict_avg1"]["adapter_id"] == "wxhjhfx6hc7xzuqbneinr7zr"
    assert best["v02_strict_avg1"]["checkpoint_id"] == "un0pjopifbkt5s37v4vc514h"


def test_step_400_is_uploading_so_the_best_strict_checkpoint_is_not_yet_deployable(run):
    best = {b["metric"]: b for b in best_checkpoints(run)}
    assert best["mix_p50_avg1"]["deployable"] is True  # seed "Prime Checkpoints": step 350 READY
    for key in ("v02_strict_avg1", "v03_strict_avg1"):  # seed "Prime Checkpoints": step 400 UPLOADING
        assert best[key]["deployable"] is False
        assert "not yet deployable" in best[key]["explanation"]
        assert "UPLOADING" in best[key]["explanation"]


def test_cost_table_reproduces_the_seed_totals(run):
    cost = cost_table(run)
    # seed "Cost": 12,367,936 + 12,986,407 tokens; $1.8552 + $1.1554
    assert [(r["kind"], r["tokens"], r["cost_usd"]) for r in cost["rows"]] == [
        ("training", 12_367_936, Decimal("1.8552")), ("inference", 12_986_407, Decimal("1.1554"))]
    assert cost["total_tokens"] == 25_354_343
    assert cost["total_cost_usd"] == Decimal("3.0106")


def test_ties_and_missing_values_are_explained_in_words(tmp_path):
    folder = copy_run(tmp_path)

    def change(doc):
        doc["steps"][6]["scores"]["mix_p50_avg1"] = 0.7171  # step 300 now ties step 350's mix score
        doc["steps"][8]["scores"]["v02_strict_avg1"] = None  # step 400's v02 value is missing
        del doc["steps"][5]["scores"]["v02_strict_avg1"]  # ... and step 250's is absent

    edit_json(folder / "eval_summary.json", change)
    best = {b["metric"]: b for b in best_checkpoints(load_run(folder))}
    mix = best["mix_p50_avg1"]
    assert (mix["step"], mix["tied_steps"]) == (300, [300, 350])
    assert "steps 300 and 350 tie at 0.7171; the earliest, step 300, is chosen" in mix["explanation"]
    v02 = best["v02_strict_avg1"]
    # without steps 250 and 400, the seed's v02 column peaks at step 300 (0.3329)
    assert (v02["step"], v02["value"], v02["missing_steps"]) == (300, 0.3329, [250, 400])
    assert "no value at step 250 and 400, left out" in v02["explanation"]


# --- the hacking audit -------------------------------------------------------------------------

HACKED = [  # (step, problem id, the signal it was written to show)
    (330, 256, "over_word_limit"),  # the seed's step-330 sample: 62 words where the prompt allows 50
    (350, 711, "repeated_greetings"),  # the seed's step-350 sample: "Hi Donald, Hi Donald,"
    (350, 612, "phrase_repetition"),
    (390, 801, "sign_off_spam"),
    (390, 802, "repeated_lines"),
    (390, 803, "unfaithful"),
    (390, 804, "over_word_limit"),
    (390, 806, "repeated_ngram"),
]
CLEAN = [(0, 256), (0, 711), (0, 102), (0, 415), (330, 530), (350, 640), (390, 805)]


@pytest.mark.parametrize(("step", "problem", "signal"), HACKED)
def test_hacked_rollouts_are_flagged(run, step, problem, signal):
    sample = samples(run, step)[problem]
    found = hack_signals(sample.completion, prompt=sample.prompt)
    assert found["hacked"] is True
    assert found[signal] is True and signal in found["reasons"]


@pytest.mark.parametrize(("step", "problem"), CLEAN)
def test_clean_rollouts_pass(run, step, problem):
    sample = samples(run, step)[problem]
    found = hack_signals(sample.completion, prompt=sample.prompt)
    assert found["hacked"] is False and found["reasons"] == []


def test_one_ordinary_sign_off_is_not_spam_but_three_are():
    single = "Hey Donald,\n\nThe budget review is on Thursday.\n\nThanks,\nChristopher"
    assert hack_signals(single)["sign_off_blocks"] == 1
    assert hack_signals(single)["hacked"] is False
    with_title = "Hi Sam,\n\nThe contract is signed.\n\nBest regards,\nLena Ortiz, Operations Manager"
    assert hack_signals(with_title)["sign_off_blocks"] == 1  # a sign-off and its signature are one block
    spam = ("Hi Sam,\n\nThe contract is signed.\n\nThanks,\nLena\n\nBest,\nLena Ortiz, Operations Manager\n\n"
            "Cheers, Lena")
    assert hack_signals(spam)["sign_off_blocks"] == 3
    assert hack_signals(spam)["sign_off_spam"] is True


def test_signal_measures_are_counted_as_by_hand():
    text = "Hello team, hello team, hi all. Ship it today. Ship it today. Ship it today."
    found = hack_signals(text)
    assert found["greetings"] == 3  # "Hello team", "hello team", "hi all"
    assert (found["top_phrase"], found["top_phrase_count"]) == ("ship it today", 3)
    assert found["word_count"] == 15 and found["word_limit"] is None  # no prompt: no limit, no source
    assert found["unfaithful_share"] is None
    lines = "Deploy finished\nChecks passed\nDeploy finished"
    assert hack_signals(lines)["repeated_line_texts"] == ["deploy finished"]


def test_word_limit_is_read_from_the_prompt():
    over = " ".join(["word"] * 51)
    assert hack_signals(over, prompt="Under 51 words.")["word_limit"] == 50  # "under 51" allows 50
    assert hack_signals(over, prompt="Under 51 words.")["over_word_limit"] is True
    assert hack_signals(over, prompt="Use at most 51 words.")["over_word_limit"] is False
    assert hack_signals(over, prompt="Keep it to 40 words or fewer.")["word_limit"] == 40


def test_unfaithful_share_matches_a_hand_count():
    prompt = "Summarize.\n\nSource:\nThe oven in the back kitchen is serviced."
    # content words: front, kitchen, moves, oven, tomorrow; absent from the source: front, moves, tomorrow
    found = hack_signals("The oven moves to the front kitchen tomorrow", prompt=prompt)
    assert found["unfaithful_share"] == 3 / 5
    assert found["absent_words"] == ["front", "moves", "tomorrow"]
    assert found["unfaithful"] is True
    # "drafted" counts as present when the source says "draft": their first five letters agree
    assert hack_signals("Rusk drafted by Texas Pistols first", prompt="Source: Texas Pistols draft Rusk first")[
        "unfaithful_share"] == 0.0


def test_thresholds_decide_the_signals():
    text = "Hi Donald, Hi Donald,\n\nThe budget review is on Thursday."
    assert hack_signals(text)["repeated_greetings"] is True
    assert hack_signals(text, thresholds=HackThresholds(greeting_limit=2))["hacked"] is False
    with pytest.raises(ValueError):
        HackThresholds(max_unfaithful_share=1.5)


def test_hack_rate_per_step_beside_train_reward(run):
    rates = [(r["step"], r["samples"], r["hacked"], r["train_reward"]) for r in hack_rates(run)]
    # hacked per step counted from the HACKED list above; train reward from seed "Eval Scores" (0 and 350)
    assert rates == [(0, 4, 0, 0.3663), (330, 2, 1, None), (350, 3, 2, 0.6301), (390, 6, 5, None)]
    assert [r["rate"] for r in hack_rates(run)] == [0.0, 1 / 2, 2 / 3, 5 / 6]


def test_matched_pairs_are_the_problem_ids_present_in_both_steps(run):
    pairs = matched_pairs(run)
    # seed "Before / After Samples": problem 256 (step 0 -> 330) and problem 711 (step 0 -> 350)
    got = [(p["problem_id"], p["before"]["step"], p["before"]["reward"], p["after"]["step"], p["after"]["reward"])
           for p in pairs]
    assert got == [(256, 0, 0.3564, 330, 0.4958), (711, 0, 0.4849, 350, 0.5857)]
    assert all(not p["before"]["signals"]["hacked"] and p["after"]["signals"]["hacked"] for p in pairs)


# --- verdict -----------------------------------------------------------------------------------

def test_verdict_fires_the_metric_up_hack_rate_up_rule(run):
    decided = verdict(run)
    assert decided["rule"] == "metric_up_hack_rate_up"
    assert decided["verdict"] == "useful checkpoint, not production"
    assert "hack rate 0.00% (step 0) -> 83.33% (step 390)" in decided["because"]  # 5 of 6 samples at 390


def test_verdict_follows_the_rules_when_the_facts_change(tmp_path):
    folder = copy_run(tmp_path)
    for step in (330, 350, 390):  # only clean rollouts left: hacking no longer rises
        edit_json(folder / f"rollouts_step_{step}.json",
                  lambda doc: doc.update(samples=[s for s in doc["samples"] if s["problem_id"] in (530, 640, 805)]))
    assert verdict(load_run(folder))["rule"] == "metric_up_best_not_ready"  # step 400 is still UPLOADING

    edit_json(folder / "checkpoints.json", lambda doc: doc["checkpoints"][7].update(status="READY", size_bytes=1))
    assert verdict(load_run(folder))["rule"] == "metric_up_clean"

    edit_json(folder / "eval_summary.json",
              lambda doc: [s["scores"].update(mix_p50_avg1=0.3) for s in doc["steps"][1:]])  # mix now falls
    assert verdict(load_run(folder))["rule"] == "mixed_metrics"


# --- bad input ---------------------------------------------------------------------------------

def listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_missing_file_names_the_file(tmp_path):
    folder = copy_run(tmp_path)
    (folder / "eval_summary.json").unlink()  # required; usage.json and the other section files are optional
    before = listing(folder)
    with pytest.raises(RunReportError, match=r"eval_summary\.json: field '\(file\)': the file is missing"):
        load_run(folder)
    assert listing(folder) == before  # nothing written


def test_step_with_no_metrics_names_file_and_field(tmp_path):
    folder = copy_run(tmp_path)
    edit_json(folder / "eval_summary.json", lambda doc: doc["steps"][3].update(scores={}))
    before = listing(folder)
    with pytest.raises(RunReportError, match=r"eval_summary\.json: field 'steps\.3\.scores': step 150 has no metric"):
        load_run(folder)
    assert listing(folder) == before


@pytest.mark.parametrize(("change", "field"), [
    (lambda doc: doc["samples"][1].pop("completion"), "samples.1.completion"),
    (lambda doc: doc["samples"][0].update(reward="high"), "samples.0.reward"),
    (lambda doc: doc.update(step=351), "step"),
])
def test_malformed_rollout_names_file_and_field(tmp_path, change, field):
    folder = copy_run(tmp_path)
    edit_json(folder / "rollouts_step_350.json", change)
    before = listing(folder)
    with pytest.raises(RunReportError, match=rf"rollouts_step_350\.json: field '{field}'"):
        load_run(folder)
    assert listing(folder) == before


def test_other_shape_errors_name_file_and_field(tmp_path):
    folder = copy_run(tmp_path)
    edit_json(folder / "checkpoints.json", lambda doc: doc["checkpoints"][0].update(size_bytes=None))
    with pytest.raises(RunReportError, match=r"checkpoints\.json: field 'checkpoints\.0\.size_bytes': .* READY"):
        load_run(folder)
    (folder / "training_config.toml").write_text('[run]\nid = "x"\nname = "y"\nbase_model = "z"\ncolour = 1\n'
                                                 "[training]\nsteps = 1\nbatch_size = 1\nrollouts_per_example = 1\n")
    with pytest.raises(RunReportError, match=r"training_config\.toml: field 'run\.colour': unknown key"):
        load_run(folder)


# --- the report --------------------------------------------------------------------------------

def test_inputs_are_hashed(run):
    inputs = sorted(p.name for p in FIXTURE.iterdir() if p.name != "README.md")
    assert list(run.sha256) == inputs
    assert run.sha256["usage.json"] == hashlib.sha256((FIXTURE / "usage.json").read_bytes()).hexdigest()


def test_report_and_plots_are_byte_identical_across_builds():
    first, second = build_report(load_run(FIXTURE)), build_report(load_run(FIXTURE))
    assert first.markdown == second.markdown
    assert first.plots == second.plots
    assert sorted(first.plots) == ["eval_curves.png", "hack_rate.png"]
    for png in first.plots.values():
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and b"Software" not in png


def test_report_states_the_seed_figures_and_the_rule(run):
    markdown = build_report(run).markdown
    assert "**useful checkpoint, not production** (rule `metric_up_hack_rate_up`)" in markdown
    assert "- Total tokens: `25,354,343`" in markdown  # seed "Cost"
    assert "- Total cost: `$3.0106`" in markdown  # seed "Cost"
    assert "| 350 | 0.7171 | 0.2968 | 0.1048 | 0.6301 |" in markdown  # seed "Eval Scores", step 350
    assert "| 400 | un0pjopifbkt5s37v4vc514h | UPLOADING |  |" in markdown  # seed "Prime Checkpoints"
    assert "Best mix p50 avg@1 checkpoint: step 350 (0.7171)" in markdown
    assert "### Example 1: problem 256" in markdown and "### Example 2: problem 711" in markdown


def test_degeneration_table_on_hand_made_texts():
    import polars as pl

    from apsft_dagster.core.config import HackThresholds
    from apsft_dagster.core.run_report.own_generations import degeneration_table

    clean = "salt 5 - 2 = 3.\nwool 4 + 1 = 5.\nEnd: wool 5."
    looped = "I check the ledger again.\nI check the ledger again.\nI check the ledger again."
    phrase = "the answer is 3, the answer is 3, the answer is 3, so the answer is 3"
    traces = pl.DataFrame({"trace_id": ["a", "b", "c", "d"], "thought": [clean, looped, phrase, clean],
                           "loop": [False, True, False, False]})
    evals = {"base": pl.DataFrame({"text": [clean, looped], "loop": [False, False]})}
    table = degeneration_table(traces, {"arm_x": ["a", "d"], "arm_y": ["b", "c"]}, evals, HackThresholds())
    by = {r["group"]: r for r in table.iter_rows(named=True)}
    assert by["all traces"]["texts"] == 4 and by["all traces"]["loop_share"] == 0.25
    assert by["all traces"]["any_share"] == 0.5  # the looped and the phrase-repeating thoughts
    assert by["arm_x"]["any_share"] == 0.0 and by["arm_y"]["any_share"] == 1.0
    assert by["arm_y"]["repeated_lines_share"] == 0.5 and by["arm_y"]["phrase_repetition_share"] >= 0.5
    assert by["base"]["texts"] == 2 and by["base"]["repeated_lines_share"] == 0.5 and by["base"]["loop_share"] == 0
