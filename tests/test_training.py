"""LoRA training: the step plan, seeded initial adapters across processes, kill-and-resume byte identity."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import TrainingError
from apsft_dagster.core.layout import adapter_checkpoint, adapter_dir, adapter_report, loss_curve
from apsft_dagster.core.policies import parse_policy, policy_keys, stage_a_policies
from apsft_dagster.core.training.records import epoch_order, windows
from tiny import small_training, tiny_model, training_rows, training_store

ARM = "random_natural"
POLICY = f"{ARM}-seed42"


def test_policies_put_stage_a_first_and_parse_back():
    config = load_config("smoke")
    keys = policy_keys(config)
    assert keys[:6] == stage_a_policies(config) and all(k.endswith("-seed42") for k in keys[:6])
    assert all(k.endswith("-seed43") for k in keys[6:]) and len(keys) == 12
    assert parse_policy("joint_potential-seed43") == ("joint_potential", 43)
    with pytest.raises(TrainingError, match="made_up-seed42"):
        parse_policy("made_up-seed42")


@pytest.mark.parametrize("rows,epochs,accum", [(36, 2, 4), (720, 2, 16), (7, 3, 4), (5, 1, 8)])
def test_windows_take_exactly_ceil_rows_epochs_over_accumulation_steps(rows, epochs, accum):
    plan = windows(rows, epochs, accum, 42, ARM)
    assert len(plan) == math.ceil(rows * epochs / accum)
    stream = [r for w in plan for r in w]
    for e in range(epochs):  # every epoch visits every row exactly once
        assert sorted(stream[e * rows:(e + 1) * rows]) == list(range(rows))
    assert plan == windows(rows, epochs, accum, 42, ARM)  # seeded, not from process state


def test_record_order_depends_on_seed_arm_and_epoch():
    base = epoch_order(50, 42, ARM, 0)
    assert base != epoch_order(50, 43, ARM, 0) != epoch_order(50, 42, "success_rft", 0)
    assert base != epoch_order(50, 42, ARM, 1)


_INITIAL = """
import sys
from apsft_dagster.core.config import load_config
from apsft_dagster.core.training.loop import attach_adapter, load_base, seed_everything
config = load_config("smoke")
seed_everything(42)
print(attach_adapter(load_base(sys.argv[1], config.compute), config.training, 42)[3])
"""


@pytest.mark.slow
def test_two_processes_create_identical_initial_adapters(tmp_path):
    """This process and a fresh one, each seeding and creating the adapter on its own."""
    from apsft_dagster.core.training.loop import attach_adapter, load_base, seed_everything

    base = tiny_model(tmp_path / "base", 0, layers=2)
    child = subprocess.run([sys.executable, "-c", _INITIAL, base], capture_output=True, text=True, check=True)
    config = load_config("smoke")
    seed_everything(42)
    here = attach_adapter(load_base(base, config.compute), config.training, 42)[3]
    assert child.stdout.strip().splitlines()[-1] == here and len(here) == 64
    import torch

    torch.manual_seed(7)  # process RNG state before creation does not matter: the seed is reset just before
    assert attach_adapter(load_base(base, config.compute), config.training, 42)[3] == here
    assert attach_adapter(load_base(base, config.compute), config.training, 43)[3] != here


_KILLED = """
import os, signal, sys
from apsft_dagster.core.config import load_config
from apsft_dagster.core.store import Store
from apsft_dagster.core.training import checkpoint, policy
sys.path.insert(0, sys.argv[3])
from tiny import small_training
save = checkpoint.Checkpoints.save
def save_then_die(self, state, progress):
    save(self, state, progress)
    if progress["step"] == 4:
        os.kill(os.getpid(), signal.SIGKILL)  # midway, no cleanup of any kind
checkpoint.Checkpoints.save = save_then_die
config = small_training(load_config("smoke"), checkpoint_every=2)
policy.train_policy(Store(sys.argv[1]), config, "random_natural-seed42", sys.argv[2], "manifest")
"""


def _store_with_rows(root, base):
    return training_store(root, base, ARM, training_rows(20))


@pytest.mark.slow
def test_killed_training_resumes_to_a_byte_identical_adapter(tmp_path):
    from apsft_dagster.core.training.policy import train_policy

    base = tiny_model(tmp_path / "base", 0, layers=2)
    config = small_training(load_config("smoke"), checkpoint_every=2)
    whole = _store_with_rows(tmp_path / "whole", base)
    report = train_policy(whole, config, POLICY, base, "manifest", log=lambda m: None)
    assert report["optimizer_steps"] == math.ceil(20 * 2 / 4) == len(report["curve"])
    assert report["timing"]["resumed_from_step"] == 0

    killed = _store_with_rows(tmp_path / "killed", base)
    proc = subprocess.run([sys.executable, "-c", _KILLED, str(killed.root), base, str(Path(__file__).parent)],
                          capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert not killed.exists(adapter_report(POLICY)) and not killed.exists(adapter_dir(POLICY))
    assert json.loads((killed.path(adapter_checkpoint(POLICY)) / "progress.json").read_text())["step"] == 4

    resumed = train_policy(killed, config, POLICY, base, "manifest", log=lambda m: None)
    assert resumed["timing"]["resumed_from_step"] == 4
    for name in (adapter_dir(POLICY), adapter_report(POLICY), loss_curve(POLICY)):
        assert killed.verify(name) == whole.verify(name), name
    one = json.loads(whole.receipt_path(adapter_dir(POLICY)).read_text())["files"]
    assert one == json.loads(killed.receipt_path(adapter_dir(POLICY)).read_text())["files"]
    assert set(one) == {"adapter_config.json", "adapter_model.safetensors"}
    assert not killed.exists(adapter_checkpoint(POLICY))  # cleared once the report is written


def test_a_checkpoint_of_another_training_is_discarded_not_resumed(tmp_path):
    from apsft_dagster.core.training.policy import train_policy

    base = tiny_model(tmp_path / "base", 0)
    config = small_training(load_config("smoke"), checkpoint_every=2)
    store = _store_with_rows(tmp_path / "s", base)
    logs = []
    train_policy(store, config, POLICY, base, "m", log=logs.append)
    store.remove(adapter_report(POLICY))
    from apsft_dagster.core.training.checkpoint import Checkpoints

    Checkpoints(store, adapter_checkpoint(POLICY)).save({}, {"step": 3, "curve": [], "identity": "other"})
    again = train_policy(store, small_training(config, learning_rate=1e-3), POLICY, base, "m", log=logs.append)
    assert again["timing"]["resumed_from_step"] == 0
    assert any("belongs to another training" in m for m in logs)


def test_a_profiles_targets_override_the_derived_ones_and_must_be_decoder_projections(tmp_path):
    from transformers import AutoModelForCausalLM

    from apsft_dagster.core.training.lora import target_modules

    model = AutoModelForCausalLM.from_pretrained(tiny_model(tmp_path / "b", 0, layers=2))
    training = load_config("smoke").training
    assert target_modules(model, training) == (sorted(training.target_modules["qwen3"]), 2 * 7)
    derived = small_training(load_config("smoke"), target_modules={}).training  # no entry: the module tree's
    assert target_modules(model, derived) == (sorted(training.target_modules["qwen3"]), 2 * 7)
    fewer = small_training(load_config("smoke"), target_modules={"qwen3": ["q_proj", "k_proj"]}).training
    assert target_modules(model, fewer) == (["k_proj", "q_proj"], 2 * 2)  # an override: its modules, counted
    guessed = small_training(load_config("smoke"),
                             target_modules={"qwen3": [*training.target_modules["qwen3"], "in_proj_z"]})
    with pytest.raises(TrainingError, match=r"\['in_proj_z'\] are not linear modules"):
        target_modules(model, guessed.training)


def test_qwen35_linear_attention_projections_are_listed_for_its_architecture():
    """The full profile's targets checked against transformers' own Qwen3.5 modules, never guessed."""
    from transformers import AutoModelForCausalLM, Qwen3_5TextConfig

    from apsft_dagster.core.training.lora import target_modules

    cfg = Qwen3_5TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                            num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=2,
                            linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8)
    model = AutoModelForCausalLM.from_config(cfg)
    import yaml

    from apsft_dagster.core.config import Training
    from apsft_dagster.core.paths import CONFIG_DIR

    full = Training.model_validate(yaml.safe_load((CONFIG_DIR / "full.yaml").read_text())["training"])
    targets, pairs = target_modules(model, full)
    assert {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"} <= set(targets)
    assert pairs == 3 * (5 + 3) + 1 * (4 + 3)  # 3 linear-attention + 1 full-attention block, each with an MLP


def test_the_nf4_base_needs_cuda(monkeypatch):
    from apsft_dagster.core.config import Compute
    from apsft_dagster.core.training.loop import load_base

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(TrainingError, match="nf4 needs a CUDA device"):
        load_base("unused", Compute.model_construct(device="cuda", dtype="bfloat16", quantization="nf4"))
    assert os.environ.get("CUDA_VISIBLE_DEVICES") != "unexpected"
