"""README command 1's run (smoke, a fresh process, the second core's helpers on): its catalog and
model, its lines, and partitions computed again in this process, byte for byte.

The same bytes whichever process computes a partition is proved partition by partition: the
harvest's later tasks (the helper's share) by test_trace_bank's kill and resume, which computes the
last six again in this process; a policy of Stage A's the helper computed and one task's score and
R1 shards by the test below; an adapter by test_training_assets."""

import shutil
from collections.abc import Callable

import dagster as dg
import pytest

from apsft_dagster.core.base_model import inspect_model_dir
from apsft_dagster.core.layout import BASE_MODEL_REPORT as REPORT
from apsft_dagster.core.layout import TASK_CATALOG
from apsft_dagster.core.store import Store
from apsft_dagster.experiment.assets.base_model import base_model
from apsft_dagster.resources import ExperimentResource, ScoringResource


@pytest.fixture(scope="module")
def in_process(smoke_run):
    results, store = smoke_run
    return results["tasks_and_model"], store


def test_catalog_checks_pass_and_metadata_is_reported(in_process):
    result, store = in_process
    assert result.success
    evaluations = result.get_asset_check_evaluations()
    assert sorted(e.check_name for e in evaluations) == ["answer_not_in_prompt", "cell_counts", "eval_train_firewall"]
    assert all(e.passed for e in evaluations)
    catalog = store.get_parquet(TASK_CATALOG)
    assert catalog.height == 18 + 36 + 12 + 24 + 36  # the last 36: rendering (core IID, second template)


def test_base_model_is_a_partly_capable_policy(in_process):
    _, store = in_process
    report = store.get_json(REPORT)
    assert 5e5 <= report["parameters"] <= 2e6
    assert report["sampled_close_rate"] >= 0.8
    assert 0.05 < report["sampled_accuracy"] < 0.95
    assert 0.05 < report["greedy_accuracy"] < 0.95
    assert report["fingerprint"] == store.verify("base_model")
    materialization = [e for e in in_process[0].get_asset_materialization_events()
                       if e.asset_key == dg.AssetKey("base_model")][0].materialization
    assert materialization.metadata["sampled_close_rate"].value == report["sampled_close_rate"]


def test_saved_model_reloads_and_validates_as_a_local_model_directory(in_process):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, store = in_process
    path = store.path("base_model")
    found = inspect_model_dir(path)
    assert found["model_type"] == "qwen3_5" and found["fingerprint"] == store.verify("base_model")
    snapshot = found["snapshot"]
    assert snapshot["architectures"] == ["Qwen3_5ForConditionalGeneration"] and snapshot["vision_tower"]
    assert snapshot["layer_types"] == {"full_attention": 1, "linear_attention": 3}
    assert snapshot["chat_template"] == "opens the thinking turn" and not snapshot["tie_word_embeddings"]
    assert {"chat_template.jinja", "preprocessor_config.json", "video_preprocessor_config.json", "tokenizer.json",
            "tokenizer_config.json", "generation_config.json", "model.safetensors"} <= set(found["files"])
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.convert_tokens_to_ids("</think>") != tokenizer.unk_token_id
    assert type(model).__name__ == "Qwen3_5ForCausalLM" and not model.config.tie_word_embeddings


def test_command_one_says_one_line_per_stage_in_order(cli_run):
    from apsft_dagster.experiment.stages import STAGES

    proc, _, _ = cli_run
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines if line.startswith("  ") and line.split()[0].endswith("_job")] == [
        s.job for s in STAGES]  # one quiet line per stage, in order
    assert f"apsft run: {len(STAGES)}/{len(STAGES)} stages succeeded" in proc.stdout
    assert "DEBUG" not in proc.stdout + proc.stderr  # Dagster's own log only with --verbose
    manifest_line = next(line for line in lines if line.split()[0] == "sft_manifest_and_audits_job")
    assert " ok " in manifest_line and "checks 3/3" in manifest_line  # incl. byte_identical_rerun


def _helped(proc, step: str) -> str:
    """The last partition `step`'s helper computed in command 1 (a count's last line is always shown:
    core/progress.py, Throttle)."""
    helped = [line.split()[4].rstrip(":") for line in proc.stderr.splitlines()
              if line.startswith(f"  {step} (second core): [")]
    assert helped, f"command 1's {step} handed nothing to a helper"
    return helped[-1]


def _recomputed(step: str, proc, experiment) -> tuple[str, list[str], Callable[[str], dict]]:
    """(key, the names it writes, the helper's own work function) for one step's partition."""
    from apsft_dagster.core.layout import R1_BANK, SCORE_BANK, eval_generations, shard_file
    from apsft_dagster.experiment.assets.evaluation import generations_worker
    from apsft_dagster.experiment.assets.r1_labels import r1_worker
    from apsft_dagster.experiment.assets.score_bank import score_worker

    if step == "stage_a_generations":
        policy = _helped(proc, step)
        return policy, [eval_generations(policy)], generations_worker(experiment)
    task = _helped(proc, "trace_bank")  # scoring and R1 of a task the harvest's helper drew
    batch = ScoringResource(experiment=experiment).batch_size
    bank, work = {"score_bank": (SCORE_BANK, lambda: score_worker(experiment, batch)),
                  "r1_labels": (R1_BANK, lambda: r1_worker(experiment))}[step]
    return task, [shard_file(bank, task)], work()


@pytest.mark.parametrize("step", ["score_bank", "r1_labels", "stage_a_generations"])
def test_a_partition_computed_again_in_this_process_is_the_same_file(cli_run, tmp_path, monkeypatch, step):
    """Command 1's second-core helper claimed the later part of its harvest's tasks and of Stage A's
    policies (its stderr names them). A partition computed again here, in a process with another
    history and no helper, with the helper's own work function, is the same file: a policy of
    Stage A's that the helper computed, and the scoring and R1 of a task whose traces the helper drew (on
    smoke the step computes those itself; on the laptop a helper shares them too)."""
    from apsft_dagster.workers.local import SWITCH

    proc, store, _ = cli_run
    copy = Store(tmp_path / "store")
    shutil.copytree(store.root, copy.root)
    monkeypatch.setenv(SWITCH, "off")
    key, names, work = _recomputed(step, proc, ExperimentResource(profile="smoke", store_dir=str(copy.root)))
    for name in names:
        copy.remove(name)
    result = work(key)
    assert result.get("action") != "kept" and result["figures"].get("reused", 0) == 0, result  # computed, not kept
    assert [copy.verify(n) for n in names] == [store.verify(n) for n in names]


def test_full_profile_validates_and_fingerprints_a_local_model_directory(in_process, tmp_path, monkeypatch):
    _, store = in_process
    monkeypatch.setenv("APSFT_MODEL_DIR", str(store.path("base_model")))  # a real saved Qwen3.5-layout directory
    out = Store(tmp_path / "full_store")
    result = dg.materialize([base_model],
                            resources={"experiment": ExperimentResource(profile="full", store_dir=str(out.root))})
    assert result.success
    report = out.get_json(REPORT)
    assert report["source"] == "local" and report["model_type"] == "qwen3_5"
    assert report["snapshot"]["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert report["fingerprint"] == store.verify("base_model")
    assert report["revision"] == "851bf6e806efd8d0a36b00ddf55e13ccb7b8cd0a"
