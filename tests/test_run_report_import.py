"""The RL run report reads the logs trainers write (core/run_report/importers/): folders laid out as
TRL, TensorBoard, W&B and verl write them (tests/rl_import_folders.py) each give a report and a
verdict through the core, with what they lack shown as "not recorded". Expected values are read
off the hand-made logs: the best step per metric, the checkpoint statuses, the rule that fires."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apsft_dagster.core.run_report import best_checkpoints, build_report, cost_table, load_run, verdict
from apsft_dagster.core.run_report.registry import check_unchanged, folder_digests, register
from apsft_dagster.core.store import Store, sha256_file
from rl_import_folders import BASE, WEIGHTS, tensorboard_folder, trl_folder, verl_folder, wandb_folder

NOT_AUDITED = "metric_up_not_audited"


def best(run) -> dict:
    return {b["metric"]: (b["step"], b["value"], b["deployable"]) for b in best_checkpoints(run)}


def add_clean_rollouts(folder: Path) -> None:
    """verl-style dumps at the two saved steps, each sample clean under the chat signals."""
    (folder / "rollouts").mkdir()
    for step in (10, 20):
        rows = [{"input": "Reply in one line: is the build green?", "output": "Yes, the build is green.",
                 "score": step / 20}]
        (folder / "rollouts" / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_trl_output_folder_gives_a_report_and_a_verdict(tmp_path):
    folder = trl_folder(tmp_path / "trl-run")
    run = load_run(folder)
    assert (run.source_format, run.not_recorded) == ("trl", ("usage", "rollouts"))
    assert (run.config.run.id, run.config.run.base_model, run.config.training.steps) == ("trl-run", BASE, 20)
    # eval_loss falls 0.5 -> 0.375 (lower is better: its key says loss), eval_reward rises 0.25 -> 0.5: both best at 20
    assert [(m.key, m.higher_is_better) for m in run.evals.metrics] == [("eval_loss", False), ("eval_reward", True)]
    assert best(run) == {"eval_loss": (20, 0.375, None), "eval_reward": (20, 0.5, None)}
    rewards = [(r.step, r.reward_mean) for r in run.train_reward.steps]
    assert rewards == [(5, 0.25), (10, 0.375), (15, 0.5), (20, 0.625)]
    sizes = {c.id: c.size_bytes for c in run.checkpoints.checkpoints}
    assert sizes == {f"checkpoint-{s}": sum(p.stat().st_size for p in (folder / f"checkpoint-{s}").iterdir())
                     for s in (10, 20)}
    assert {c.status for c in run.checkpoints.checkpoints} == {"READY"}
    assert [(a.id, a.status, a.deployable) for a in run.adapters.adapters] == [
        ("checkpoint-10", "READY", None), ("checkpoint-20", "READY", None)]
    assert verdict(run)["rule"] == NOT_AUDITED  # every metric improved; no rollout saved
    assert cost_table(run) is None
    markdown = build_report(run).markdown
    assert "Not recorded in this run: usage and cost, rollout samples (so hacking is not audited)." in markdown
    assert "Usage and cost: not recorded" in markdown
    assert "| 20 | checkpoint-20 | READY | not recorded | not recorded |" in markdown
    assert "lower is better for eval_loss; higher is better for eval_reward" in markdown
    assert f"| checkpoint-10/adapter_model.safetensors | {len(WEIGHTS)} |" in markdown  # measured, not hashed


@pytest.mark.parametrize(("weights_at_20", "rule"), [
    (True, "metric_up_deployability_not_recorded"),  # READY, but nobody recorded whether it deploys
    (False, "metric_up_best_not_ready"),  # checkpoint-20 has no weights: INCOMPLETE, a recorded "not deployable"
])
def test_the_readiness_rules_read_what_is_recorded_and_nothing_else(tmp_path, weights_at_20, rule):
    folder = trl_folder(tmp_path / "run", weights_at_20=weights_at_20)
    add_clean_rollouts(folder)
    run = load_run(folder)
    assert run.not_recorded == ("usage",)
    assert verdict(run)["rule"] == rule


def test_tensorboard_event_files_give_a_report_and_a_verdict(tmp_path):
    run = load_run(tensorboard_folder(tmp_path / "tb-run"))
    assert (run.source_format, run.not_recorded) == ("tensorboard", ("usage", "checkpoints", "adapters", "rollouts"))
    # eval/runtime is bookkeeping; eval/accuracy peaks at 0.75 (step 20), eval/loss bottoms at 0.25 (step 30)
    assert best(run) == {"eval/accuracy": (20, 0.75, None), "eval/loss": (30, 0.25, None)}
    assert [(r.step, r.reward_mean) for r in run.train_reward.steps] == [(10, 0.25), (20, 0.5), (30, 0.75)]
    decided = verdict(run)
    assert decided["rule"] == NOT_AUDITED  # accuracy 0.5 -> 0.625 and loss 0.5 -> 0.25 both improved
    assert "deployability not recorded for best step(s): 20, 30" in decided["because"]
    markdown = build_report(run).markdown
    assert ("Not recorded in this run: usage and cost, checkpoint statuses and sizes, adapters and their "
            "deployability, rollout samples") in markdown
    assert "Checkpoints: not recorded" in markdown and "deployability not recorded: the run has no checkpoint" \
        in markdown


def test_a_wandb_history_csv_reads_sparse_rows(tmp_path):
    run = load_run(wandb_folder(tmp_path / "wb"))
    assert run.source_format == "wandb"
    assert [(e.step, e.scores) for e in run.evals.steps] == [(0, {"eval/accuracy": 0.25, "eval/loss": 1.0}),
                                                            (10, {"eval/accuracy": 0.5, "eval/loss": 0.75})]
    assert best(run) == {"eval/accuracy": (10, 0.5, None), "eval/loss": (10, 0.75, None)}
    assert verdict(run)["rule"] == NOT_AUDITED


def test_verl_jsonl_metrics_and_rollout_dumps(tmp_path):
    run = load_run(verl_folder(tmp_path / "verl"))
    assert (run.source_format, run.not_recorded) == ("jsonl", ("usage", "checkpoints", "adapters"))
    assert [(r.step, r.reward_mean) for r in run.train_reward.steps] == [(1, 0.25), (2, 0.5)]  # critic/score/mean
    assert best(run) == {"val-core/gsm8k/reward/mean@1": (2, 0.75, None)}
    # problem ids by first appearance: "2 + 2" 0, "3 + 3" 1, "5 + 1" 2; "3 + 3" is at both steps
    assert [[s.problem_id for s in run.rollouts[step].samples] for step in (1, 2)] == [[0, 1], [1, 2]]
    report = build_report(run)
    assert "### Example 1: problem 1" in report.markdown and "### Example 2" not in report.markdown
    assert report.verdict["rule"] == "metric_up_deployability_not_recorded"  # clean, best step 2 not recorded


def test_a_native_folder_without_its_optional_files_reports_them_not_recorded(tmp_path):
    import shutil

    folder = tmp_path / "native"
    shutil.copytree(Path(__file__).parent / "fixtures" / "rl_run", folder)
    for name in ("train_reward.json", "usage.json", "checkpoints.json", "adapters.json"):
        (folder / name).unlink()
    run = load_run(folder)
    assert run.not_recorded == ("train_reward", "usage", "checkpoints", "adapters")
    assert verdict(run)["rule"] == "metric_up_hack_rate_up"  # the fixture's rule: it needs no optional file
    markdown = build_report(run).markdown
    assert "train reward mean" not in markdown.split("## Eval Scores")[1].split("\n\n")[1]
    assert "Not recorded in this run: train reward by step, usage and cost" in markdown


def test_registration_hashes_every_file_read_in_subfolders_and_measures_the_weights(tmp_path):
    folder = trl_folder(tmp_path / "run")
    store = Store(tmp_path / "store")
    record = register(store, "run", folder)
    assert record["files"] == {k: sha256_file(folder / k) for k in (
        "checkpoint-10/adapter_config.json", "checkpoint-10/trainer_state.json", "checkpoint-20/adapter_config.json",
        "checkpoint-20/trainer_state.json", "trainer_state.json")}
    assert record["sizes"] == {"checkpoint-10/adapter_model.safetensors": len(WEIGHTS),
                               "checkpoint-20/adapter_model.safetensors": len(WEIGHTS)}
    before = folder_digests(folder)
    (folder / "checkpoint-20" / "adapter_model.safetensors").write_bytes(WEIGHTS + b"more")
    assert folder_digests(folder) != before
    with pytest.raises(Exception, match=r"checkpoint-20/adapter_model\.safetensors in .* changed after registration"):
        check_unchanged(record, load_run(folder))


def test_a_missing_tensorboard_names_the_extra_to_install(tmp_path, monkeypatch):
    import builtins

    folder = tensorboard_folder(tmp_path / "tb")
    real = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith("tensorboard"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.raises(Exception, match=r"pip install 'apsft\[tensorboard\]'"):
        load_run(folder)


def test_cli_adds_a_trl_folder_and_reports_what_is_not_recorded(tmp_path, capsys):
    from apsft_dagster.cli import main

    folder = trl_folder(tmp_path / "trl-run")
    store = tmp_path / "store"
    assert main(["rl-report", "add", "trl-run", str(folder), "--store", str(store)]) == 0
    assert f"rule {NOT_AUDITED}" in capsys.readouterr().out
    report = (store / "run_report" / "trl-run" / "report.md").read_text()
    assert "Not recorded in this run: usage and cost, rollout samples" in report
    evidence = json.loads((store / "run_report" / "trl-run" / "evidence.json").read_text())
    assert evidence["cost"] == "not recorded" and evidence["source"]["not_recorded"] == ["usage", "rollouts"]
