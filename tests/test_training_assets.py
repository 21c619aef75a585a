"""The adapters and merged_models stages of the smoke run: six Stage A policies trained, merged and probed."""

import json
import shutil

import pytest

from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import SealError
from apsft_dagster.core.layout import TASK_CATALOG, adapter_dir, adapter_report, merged_dir, merged_report, probe_report
from apsft_dagster.core.policies import replication_policies, stage_a_policies
from apsft_dagster.core.store import Store
from apsft_dagster.core.training.gate import verified_manifest
from apsft_dagster.core.training.probe import probe_prompts

STAGE_A = stage_a_policies(load_config("smoke"))

# the smoke model: 3 gated delta-rule layers (in_proj_qkv/z/b/a, out_proj + gate/up/down) and 1 full-attention
# layer (q/k/v/o + gate/up/down)
PAIRS = 3 * (5 + 3) + 1 * (4 + 3)


def test_apsft_run_trains_and_merges_only_the_stage_a_policies(smoke_run):
    results, store = smoke_run
    for asset in ("adapters", "merged_models"):
        run = results[asset]
        assert run.success
        events = run.get_asset_materialization_events()
        assert sorted(e.partition for e in events) == sorted(STAGE_A)
        checks = run.get_asset_check_evaluations()
        assert checks and all(c.passed for c in checks), [(c.check_name, c.metadata) for c in checks]
    assert all(not store.exists(adapter_report(p)) for p in replication_policies(load_config("smoke")))


def test_stage_a_gate_records_whether_stage_b_would_fit(smoke_run):
    """Stage A's gate priced its matrix with the costliest seed-43 pair (recomputed here from the
    manifest's forward tokens, each potential arm against each baseline) at the warm-up's rate."""
    from apsft_dagster.core.layout import SFT_MANIFEST
    from apsft_dagster.core.selection.arms import arms_with

    results, store = smoke_run
    tokens = {e["arm"]: e["forward_tokens"] for e in store.get_json(SFT_MANIFEST)["arms"]}
    pair = max(tokens[w] + tokens[b] for w in arms_with(role="potential") for b in arms_with(role="baseline"))
    meta = next(e for e in results["adapters"].get_asset_materialization_events()).materialization.metadata
    rate, budget = meta["warmup_tokens_per_s"].value, meta["budget_device_hours"].value
    hours = (sum(tokens.values()) + pair) / rate / 3600
    assert meta["estimated_device_hours_with_stage_b"].value == pytest.approx(hours, rel=1e-3)  # the rate is rounded
    assert meta["stage_b_within_budget"].value is True and hours <= budget
    assert meta["stage_b_budget"].value.startswith("Stage B would fit: ")


def test_adapter_reports_record_exact_steps_digests_and_a_loss_curve(smoke_run):
    results, store = smoke_run
    reports = [store.get_json(adapter_report(p)) for p in STAGE_A]
    for r in reports:
        assert r["optimizer_steps"] == len(r["curve"]) == 36 * 2 // 4
        assert r["lora_pairs"] == PAIRS and r["base_weights"] == "float32 base on cpu"
        assert r["adapter_files_sha256"] == store.verify(adapter_dir(r["policy"]))
        assert r["final_adapter_sha256"] != r["initial_adapter_sha256"]
        assert all(p["prompt"] > p["thought"] > p["boundary_answer"] for p in r["curve"][-3:])
    assert len({r["initial_adapter_sha256"] for r in reports}) == 1  # one seed, one initial adapter
    assert len({r["final_adapter_sha256"] for r in reports}) == 6  # six datasets, six adapters
    meta = next(e for e in results["adapters"].get_asset_materialization_events()).materialization.metadata
    assert meta["loss_curve"].value.startswith("![") and "data:image/svg+xml," in meta["loss_curve"].value
    assert meta["loss_curve_plot"].value.startswith("![") and "data:image/png;base64," in meta["loss_curve_plot"].value
    assert meta["tokens_per_s"].value > 0 and meta["wall_seconds"].value > 0


def test_every_merged_model_changes_exactly_its_pairs_and_answers_differently_from_base(smoke_run):
    from apsft_dagster.core.training.merge import tensor_files

    results, store = smoke_run
    base = store.path("base_model")
    names = tensor_files(base)
    assert any(n.startswith("model.language_model.") for n in names)
    assert any(n.startswith("model.visual.") for n in names)
    for policy in STAGE_A:
        report = store.get_json(merged_report(policy))
        assert report["changed_tensors"] == report["lora_pairs"] == PAIRS
        assert report["fingerprint"] == store.verify(merged_dir(policy))
        merged = store.path(merged_dir(policy))
        assert tensor_files(merged) == names  # the snapshot's own names, vision tower included
        for path in base.iterdir():  # config (architecture), tokenizer, chat template, preprocessor configs
            if path.suffix != ".safetensors":
                assert (merged / path.name).read_bytes() == path.read_bytes(), (policy, path.name)
        probe = store.get_json(probe_report(policy))
        assert probe["passed"] and 1 <= probe["differing"] <= probe["prompts"] == 8
        first = probe["first_difference"]
        assert first["base"] != first["merged"]
    meta = results["merged_models"].get_asset_materialization_events()[0].materialization.metadata
    assert "**base**" in meta["first_differing_pair"].value and meta["probe_differing"].value >= 1


def test_probe_prompts_are_fixed_and_never_a_catalog_prompt(smoke_run):
    _, store = smoke_run
    catalog = set(store.get_parquet(TASK_CATALOG)["prompt"])
    config = load_config("smoke")
    prompts = probe_prompts(config, catalog)
    assert len(prompts) == len(set(prompts)) == 8 and not set(prompts) & catalog
    assert prompts == probe_prompts(config, catalog)


def test_training_refuses_without_a_verified_seal(tmp_path):
    with pytest.raises(SealError, match="no evidence seal"):
        verified_manifest(Store(tmp_path), load_config("smoke"))


def test_released_weights_keep_the_fingerprint(smoke_run, tmp_path):
    from apsft_dagster.core.training.deploy import release_weights

    _, store = smoke_run
    policy, copy = STAGE_A[0], Store(tmp_path)
    for name in (merged_dir(policy), merged_report(policy)):
        for src, dst in ((store.path(name), copy.path(name)), (store.receipt_path(name), copy.receipt_path(name))):
            dst.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    before = copy.get_json(merged_report(policy))
    after = release_weights(copy, policy)
    assert not copy.path(merged_dir(policy)).exists() and not copy.exists(merged_dir(policy))
    assert after["fingerprint"] == before["fingerprint"] and after["files"] == before["files"]
    assert after["weights_kept"] is False and json.loads(copy.path(merged_report(policy)).read_text()) == after


@pytest.mark.slow
def test_seed_43_policies_are_trained_only_when_stage_b_asks(smoke_run, tmp_path):
    """The smoke run's plan names none (its replication stages were skipped, their partition sets
    empty); a plan naming one adds exactly that partition and the replication stages train, merge
    and probe it. A key the plan does not name is refused, by the CLI's check before it is added
    to the instance, and by the asset itself (a partition added by hand in the UI)."""
    import dagster as dg

    from apsft_dagster.core.layout import STAGE_B_PLAN
    from apsft_dagster.experiment.partitions import REPLICATION_POLICIES, STAGE_B_POLICIES
    from apsft_dagster.experiment.stages import STAGES
    from apsft_dagster.runner import check_partition_keys, run_stages
    from conftest import smoke_definitions

    results, store = smoke_run
    assert store.get_json(STAGE_B_PLAN)["replication_policies"] == [] or store.get_json(STAGE_B_PLAN)["triggered"]
    for job in ("replication_adapters", "replication_merged_models"):
        assert results[job].outcome.skipped and not results[job].outcome.run_ids
    copy = Store(tmp_path / "store")
    shutil.copytree(store.root, copy.root)
    copy.put_json(STAGE_B_PLAN, {**copy.get_json(STAGE_B_PLAN), "replication_policies": ["shortest_natural-seed43"]})
    stages = [s for s in STAGES if s.job.startswith("replication_")]
    with pytest.raises(ValueError, match="'shortest-seed43' is not a partition of it"):
        check_partition_keys(stages, {"replication_adapters_job": ["shortest-seed43"]})
    instance, defs = dg.DagsterInstance.ephemeral(), smoke_definitions(copy.root)
    assert instance.get_dynamic_partitions(REPLICATION_POLICIES) == []
    outcomes = run_stages(defs, instance, stages, alert=False)
    assert all(o.ok and not o.skipped and len(o.run_ids) == 1 for o in outcomes), outcomes
    assert instance.get_dynamic_partitions(REPLICATION_POLICIES) == ["shortest_natural-seed43"]
    assert instance.get_dynamic_partitions(STAGE_B_POLICIES) == []
    report = copy.get_json(adapter_report("shortest_natural-seed43"))
    stage_a = copy.get_json(adapter_report("shortest_natural-seed42"))
    assert report["seed"] == 43 and report["initial_adapter_sha256"] != stage_a["initial_adapter_sha256"]
    assert report["arm_sha256"] == stage_a["arm_sha256"]  # the same data, another seed
    assert copy.get_json(probe_report("shortest_natural-seed43"))["passed"]
    assert not any(copy.exists(adapter_report(p)) for p in replication_policies(load_config("smoke"))
                   if p != "shortest_natural-seed43")
    unplanned = run_stages(defs, instance, stages[:1], partition_keys={stages[0].job: ["random_natural-seed43"]},
                           alert=False)  # a known key the plan does not name
    assert not unplanned[0].ok and not copy.exists(adapter_report("random_natural-seed43"))
    (failure,) = instance.all_logs(unplanned[0].run_ids[0], of_type=dg.DagsterEventType.STEP_FAILURE)
    error = str(failure.dagster_event.event_specific_data.error)
    assert "random_natural-seed43: not among the replication policies" in error


_OTHER_PROCESS = """
import shutil, sys, torch
from apsft_dagster.core.config import load_config
from apsft_dagster.core.store import Store
from apsft_dagster.core.training.policy import train_policy
torch.set_num_threads(1)  # what earlier work in a process may leave behind (the model build sets threads)
x = torch.randn(64, 64, requires_grad=True)
(x @ x).sum().backward()
source, store = Store(sys.argv[1]), Store(sys.argv[2])
for name in ("sft_arms/random_natural.jsonl.gz", "base_model.json"):
    for a, b in ((source.path(name), store.path(name)), (source.receipt_path(name), store.receipt_path(name))):
        b.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(a, b)
train_policy(store, load_config("smoke"), "random_natural-seed42", str(source.path("base_model")), "m", log=print)
"""


@pytest.mark.slow
def test_an_adapter_does_not_depend_on_what_the_process_did_before(smoke_run, tmp_path):
    """Training pins torch's thread count (compute.threads): a process that ran other work with
    another thread count first trains the same bytes as the smoke run."""
    import subprocess
    import sys

    _, store = smoke_run
    subprocess.run([sys.executable, "-c", _OTHER_PROCESS, str(store.root), str(tmp_path)], check=True,
                   capture_output=True)
    other = Store(tmp_path)
    assert other.verify(adapter_dir("random_natural-seed42")) == store.verify(adapter_dir("random_natural-seed42"))
