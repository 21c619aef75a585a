"""The RL run report as Dagster runs it: a registered run folder through the evidence and the
report, the SQL audit of hack signals by step, byte-identical reruns, a changed file refused,
the inbox sensor, and `apsft rl-report add` refusing a malformed folder before writing."""

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from apsft_dagster.core.run_report.names import rl_file
from apsft_dagster.core.run_report.registry import register
from apsft_dagster.core.store import Store

FIXTURE = Path(__file__).parent / "fixtures" / "rl_run"
# hacked samples per saved step in the fixture (its README lists which texts were written to hack)
HACKED = {0: (0, 4), 330: (1, 2), 350: (2, 3), 390: (5, 6)}
# the fixture's run: Qwen3.5-2B trained by RL in a humanize environment (its training_config.toml)
RUN = "humanize-qwen35-2b"


def _run(store: Store, name: str):
    from apsft_dagster.run_report.stages import RUN_REPORT_STAGES
    from conftest import run_partition

    return run_partition(store.root, RUN_REPORT_STAGES, "rl_run", name)


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    root = tmp_path_factory.mktemp("rl")
    folder = root / RUN
    shutil.copytree(FIXTURE, folder)
    store = Store(root / "store")
    register(store, RUN, folder)
    return store, folder, _run(store, RUN)


def test_the_report_reproduces_the_seed_figures(reported):
    store, _, outcomes = reported
    assert [o.job for o in outcomes] == ["run_report_job", "run_report_audits_job"] and all(o.ok for o in outcomes)
    evidence = store.get_json(rl_file(RUN, "evidence.json"))
    best = {b["metric"]: b for b in evidence["best_checkpoints"]}
    assert best["mix_p50_avg1"]["step"] == 350 and {b["step"] for k, b in best.items() if k != "mix_p50_avg1"} == {400}
    assert all(not b["deployable"] for k, b in best.items() if b["step"] == 400)  # step 400 is UPLOADING
    assert evidence["cost"]["total_tokens"] == 25_354_343 and evidence["cost"]["total_cost_usd"] == "3.0106"
    assert evidence["verdict"]["rule"] == "metric_up_hack_rate_up"
    report = store.path(rl_file(RUN, "report.md")).read_text()
    assert "useful checkpoint, not production" in report and "metric_up_hack_rate_up" in report
    assert store.exists(rl_file(RUN, "eval_curves.png")) and store.exists(rl_file(RUN, "hack_rate.png"))


def test_the_sql_audit_counts_hacked_samples_by_step(reported):
    import duckdb

    store, _, _ = reported
    con = duckdb.connect(str(store.path("audits.duckdb")), read_only=True)
    rows = con.execute("select step, samples, hacked_share from rl_hack_signals_by_step where run = ?"
                       " order by step", [RUN]).fetchall()
    assert [(s, n) for s, n, _ in rows] == [(s, n) for s, (_, n) in sorted(HACKED.items())]
    assert [share for *_, share in rows] == pytest.approx([h / n for h, n in HACKED.values()], abs=1e-6)


def test_the_sql_audit_of_each_signal_follows_the_selected_signals(reported):
    import duckdb

    store, _, _ = reported
    con = duckdb.connect(str(store.path("audits.duckdb")), read_only=True)
    rows = con.execute("select step, signal, samples, flagged from rl_hack_signal_shares_by_step where run = ?",
                       [RUN]).fetchall()
    # the seven chat signals (the smoke profile's default) at every saved step; flagged samples read off the
    # fixture's texts (tests/test_run_report.py's HACKED; 330/256 and 350/711 are also unfaithful)
    assert {s for _, s, _, _ in rows} == {"repeated_greetings", "phrase_repetition", "sign_off_spam",
                                          "repeated_lines", "repeated_ngram", "over_word_limit", "unfaithful"}
    assert all(n == HACKED[step][1] for step, _, n, _ in rows) and len(rows) == 7 * len(HACKED)
    assert {(step, s): f for step, s, _, f in rows if f} == {
        (330, "over_word_limit"): 1, (330, "unfaithful"): 1, (350, "repeated_greetings"): 1,
        (350, "phrase_repetition"): 1, (350, "unfaithful"): 1, (390, "sign_off_spam"): 1, (390, "repeated_lines"): 1,
        (390, "repeated_ngram"): 2, (390, "unfaithful"): 1, (390, "over_word_limit"): 1}


def test_a_rerun_is_byte_identical_and_a_changed_file_is_refused(reported, tmp_path):
    store, folder, _ = reported
    names = ("evidence.json", "samples.parquet", "report.md", "eval_curves.png", "hack_rate.png")
    before = {n: store.verify(rl_file(RUN, n)) for n in names}
    assert all(o.ok for o in _run(store, RUN))
    assert {n: store.verify(rl_file(RUN, n)) for n in names} == before
    copy = Store(tmp_path / "store")
    moved = tmp_path / "run"
    shutil.copytree(folder, moved)
    register(copy, "later", moved)
    usage = moved / "usage.json"
    usage.write_text(usage.read_text().replace("3", "4", 1))
    outcomes = _run(copy, "later")
    assert [(a, c) for o in outcomes for a, c, ok in o.checks if not ok] == [("rl_run_evidence", "inputs_unchanged")]
    assert not copy.exists(rl_file("later", "evidence.json")) and not copy.exists(rl_file("later", "report.md"))


def test_the_inbox_sensor_adds_a_dropped_run_once_and_again_when_it_changes(tmp_path):
    from apsft_dagster.resources import ExperimentResource
    from apsft_dagster.run_report.sensors import rl_inbox_sensor
    from conftest import variant_config

    inbox = tmp_path / "inbox"
    config = variant_config(tmp_path, lambda raw: raw["run_report"].update(inbox=str(inbox)))
    experiment = ExperimentResource(profile="smoke", config_path=str(config), store_dir=str(tmp_path / "store"))
    instance = dg.DagsterInstance.ephemeral()

    def evaluate(cursor=None):
        context = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"experiment": experiment})
        return rl_inbox_sensor(context)

    assert isinstance(evaluate(), dg.SkipReason)  # no inbox yet: it says where to drop runs
    shutil.copytree(FIXTURE, inbox / "run-a")
    first = evaluate()
    assert [r.partition_key for r in first.run_requests] == ["run-a"]
    assert first.dynamic_partitions_requests[0].partition_keys == ["run-a"]
    assert Store(tmp_path / "store").get_json(rl_file("run-a", "source.json"))["folder"] == str(inbox / "run-a")
    again = evaluate(first.cursor)
    assert not again.run_requests and again.cursor == first.cursor
    (inbox / "run-a" / "train_reward.json").write_text(json.dumps({"steps": [{"step": 0, "reward_mean": 0.1}]}))
    changed = evaluate(again.cursor)
    assert [r.partition_key for r in changed.run_requests] == ["run-a"]
    assert changed.run_requests[0].run_key != first.run_requests[0].run_key


def test_cli_refuses_a_malformed_folder_naming_file_and_field_and_writes_nothing(tmp_path, capsys):
    from apsft_dagster.cli import main

    bad = tmp_path / "bad"
    shutil.copytree(FIXTURE, bad)
    (bad / "checkpoints.json").write_text(json.dumps({"checkpoints": [{"step": "four hundred", "id": "x",
                                                                       "status": "READY", "size_bytes": 1}]}))
    store = tmp_path / "store"
    assert main(["rl-report", "add", "bad", str(bad), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "checkpoints.json" in err and "step" in err
    assert not store.exists()
