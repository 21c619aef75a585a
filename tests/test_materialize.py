"""Materialize task_catalog and base_model (smoke) in-process and in a fresh process; compare bytes."""

import json

import dagster as dg
import pytest

from apsft_dagster.experiment.assets.base_model import base_model
from apsft_dagster.core.config import load_config
from apsft_dagster.core.layout import BASE_MODEL_REPORT as REPORT
from apsft_dagster.core.layout import TASK_CATALOG
from apsft_dagster.core.base_model import inspect_model_dir
from apsft_dagster.core.store import Store
from apsft_dagster.resources import ExperimentResource


@pytest.fixture(scope="module")
def in_process(smoke_run):
    results, store = smoke_run
    return results["tasks_and_model"], store


@pytest.fixture(scope="module")
def fresh_process(cli_run):
    proc, store, _ = cli_run
    return proc, store


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


@pytest.mark.slow
def test_fresh_process_run_is_byte_identical(in_process, fresh_process):
    """Every stage's files, catalog to the SFT manifest (CPU determinism across processes)."""
    from apsft_dagster.experiment.stages import STAGES

    _, first = in_process
    proc, second = fresh_process
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines if line.startswith("  ") and line.split()[0].endswith("_job")] == [
        s.job for s in STAGES]  # one quiet line per stage, in order
    assert f"apsft run: {len(STAGES)}/{len(STAGES)} stages succeeded" in proc.stdout
    assert "DEBUG" not in proc.stdout + proc.stderr  # Dagster's own log only with --verbose
    assert first.verify(TASK_CATALOG) == second.verify(TASK_CATALOG)
    assert first.verify("base_model") == second.verify("base_model")
    one = json.loads(first.receipt_path("base_model").read_text())["files"]
    two = json.loads(second.receipt_path("base_model").read_text())["files"]
    assert one == two and "model.safetensors" in one and "tokenizer.json" in one
    assert first.get_json(REPORT)["sampled_accuracy"] == second.get_json(REPORT)["sampled_accuracy"]
    for bank in ("trace_bank", "score_bank", "r1_labels"):  # every shard, via the index of shard hashes
        assert first.verify(f"{bank}/index.json") == second.verify(f"{bank}/index.json"), bank
    # the seal, all six arm files (named in the manifest) and the manifest itself
    manifest_line = next(line for line in lines if line.split()[0] == "sft_manifest_and_audits_job")
    assert " ok " in manifest_line and "checks 3/3" in manifest_line  # incl. byte_identical_rerun
    assert first.verify("evidence_seal.json") == second.verify("evidence_seal.json")
    assert first.verify("sft_manifest.json") == second.verify("sft_manifest.json")
    # every adapter and merged model, file by file, and their reports (curves, digests, counts)
    from apsft_dagster.core.layout import adapter_dir, adapter_report, loss_curve, merged_dir, merged_report
    from apsft_dagster.core.policies import stage_a_policies

    for policy in stage_a_policies(load_config("smoke")):
        for name in (adapter_dir(policy), adapter_report(policy), loss_curve(policy), merged_dir(policy),
                     merged_report(policy)):
            assert first.verify(name) == second.verify(name), name
        files = json.loads(first.receipt_path(merged_dir(policy)).read_text())["files"]
        assert files == json.loads(second.receipt_path(merged_dir(policy)).read_text())["files"]
    # the evaluation tables, the analysis and the report with its plots
    from apsft_dagster.core.layout import (REPORT_MARKDOWN, STAGE_A_DECISION, STAGE_B_DECISION, STAGE_B_PLAN,
                                           eval_generations, eval_table, report_plot)
    from apsft_dagster.core.report import PLOTS
    from apsft_dagster.core.policies import stage_a_eval_keys

    for policy in stage_a_eval_keys(load_config("smoke")):
        assert first.verify(eval_generations(policy)) == second.verify(eval_generations(policy)), policy
        assert first.verify(eval_table(policy)) == second.verify(eval_table(policy)), policy
    for name in (STAGE_A_DECISION, STAGE_B_PLAN, STAGE_B_DECISION, REPORT_MARKDOWN, *(report_plot(p) for p in PLOTS)):
        assert first.verify(name) == second.verify(name), name


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
