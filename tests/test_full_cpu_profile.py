"""`full_cpu` is `full` with only what a CPU must change: the tiny real-vocabulary snapshot (local, as
full's model is), CPU float32 without NF4, two train tasks and one sealed task a cell. Every other
value is full's, the registered token limits above all, and each changed line says the registered one."""

import re

import yaml

from apsft_dagster.core.config import load_config, read_profile
from apsft_dagster.core.paths import CONFIG_DIR

FULL_CPU = CONFIG_DIR / "full_cpu.yaml"
CHANGED = {"tasks", "model.name", "model.revision", "model.path", "compute.device", "compute.dtype",
           "compute.quantization", "compute.threads", "harvest.backend", "vllm.kv_cache_bytes"}
REGISTERED_LIMITS = {"harvest.allowance": 12288, "harvest.continuation": 2048, "harvest.record_limit": 16000,
                     "training.max_length": 16000, "evaluation.allowance": 12288, "harvest.samples_per_task": 64,
                     "vllm.max_model_len": 32768}


def _leaves(node, prefix=""):
    for key, value in node.items():
        if isinstance(value, dict) and value and key != "tasks":
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _get(node, dotted):
    for key in dotted.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node


def test_only_what_a_cpu_must_change_differs_from_full():
    full, dry = read_profile(CONFIG_DIR / "full.yaml"), read_profile(FULL_CPU)
    changed = {k for k, v in _leaves(dry) if _get(full, k) != v} - {"profile"}
    assert changed == CHANGED
    assert {k: _get(dry, k) for k in REGISTERED_LIMITS} == REGISTERED_LIMITS
    assert dry["model"]["source"] == full["model"]["source"] == "local"
    for split in ("train", "core_iid", "core_hard", "held_family"):
        assert dry["tasks"][split]["per_cell"] in (1, 2)
        assert {k: v for k, v in dry["tasks"][split].items() if k not in ("per_cell", "total")} == \
            {k: v for k, v in full["tasks"][split].items() if k not in ("per_cell", "total")}


def test_every_changed_line_says_the_registered_value():
    raw = yaml.safe_load(FULL_CPU.read_text())
    block = FULL_CPU.read_text().split("# ---- what a CPU must change", 1)[1].splitlines()[1:]
    for key in CHANGED - {"tasks"}:
        leaf = key.split(".")[-1]
        line = next(line for line in block if re.match(rf"\s+{leaf}:", line))
        assert "registered:" in line, line
    assert "registered:" in next(line for line in block if line.startswith("tasks:"))
    assert raw["extends"] == "full"


def test_it_validates_with_its_snapshot_and_is_not_full(tmp_path, monkeypatch):
    from tiny import tiny_snapshot

    monkeypatch.setenv("APSFT_MODEL_DIR", str(tiny_snapshot(tmp_path / "model", "qwen3_5", layers=2)))
    config = load_config("full_cpu")
    assert (config.profile, config.compute.device, config.compute.quantization) == ("full_cpu", "cpu", "none")
    assert config.digest != load_config("full").digest
    assert config.training.target_modules == load_config("full").training.target_modules
