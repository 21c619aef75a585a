"""`apsft plan`'s memory plan (core/plan/memory.py): parameter counts against Transformers' own
model on the meta device, each stage's bytes computed here by hand for `full` on an H100, the
parity gate's release, and the command's options."""

import json

import pytest
import torch

from apsft_dagster.cli import main
from apsft_dagster.core.config import load_config
from apsft_dagster.core.plan.memory import (
    REGISTERED_CONFIG,
    lora_params,
    memory_notes,
    memory_plan,
    text_params,
    vision_params,
)

H100 = 85_029_615_043  # round(79.19 GiB)
QWEN35 = json.loads(REGISTERED_CONFIG.read_text())


def full(monkeypatch, tmp_path, **updates):
    monkeypatch.setenv("APSFT_MODEL_DIR", str(tmp_path / "no-snapshot-here"))
    config = load_config("full", require_snapshot=False)
    return config.model_copy(update=updates)


def test_the_registered_qwen35_4b_has_4_21e9_text_and_3_3e8_vision_parameters():
    """Counted with transformers 5.24 on the meta device from configs/models/qwen3_5_4b.config.json:
    Qwen3_5ForCausalLM 4,205,751,296 (embeddings tied to the head), the vision tower 333,514,240."""
    assert text_params(QWEN35) == 4_205_751_296
    assert vision_params(QWEN35) == 333_514_240


SMALL_TEXT = {"vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "tie_word_embeddings": False}
SMALL_LINEAR = {"layer_types": ["linear_attention"] * 3 + ["full_attention"], "linear_num_key_heads": 2,
                "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 8,
                "linear_conv_kernel_dim": 4}
SMALL_VISION = {"depth": 2, "hidden_size": 32, "intermediate_size": 48, "in_channels": 3, "num_heads": 2,
                "num_position_embeddings": 16, "out_hidden_size": 64, "patch_size": 4, "spatial_merge_size": 2,
                "temporal_patch_size": 2}


def counted(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_the_counts_equal_transformers_on_small_configs_of_both_layouts():
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration, Qwen3Config, Qwen3ForCausalLM

    with torch.device("meta"):
        qwen3 = Qwen3ForCausalLM(Qwen3Config(**SMALL_TEXT))
        text = {**SMALL_TEXT, **SMALL_LINEAR, "model_type": "qwen3_5_text", "attn_output_gate": True}
        qwen35 = Qwen3_5ForConditionalGeneration(Qwen3_5Config(text_config=text, vision_config=SMALL_VISION))
    assert text_params(SMALL_TEXT) == counted(qwen3)
    both = {"text_config": text, "vision_config": SMALL_VISION}
    assert text_params(both) == counted(qwen35.model.language_model) + counted(qwen35.lm_head)
    assert vision_params(both) == counted(qwen35.model.visual)


def test_a_mixture_of_experts_counts_its_fused_experts_but_adapts_only_its_attention():
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    moe = {**SMALL_TEXT, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48}
    with torch.device("meta"):
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**moe))
    assert text_params(moe) == counted(model)
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".layers." in n]
    assert sorted({n.rsplit(".", 1)[1] for n in linears}) == ["k_proj", "o_proj", "q_proj", "v_proj"]
    attention = 4 * 8 * ((64 + 128) + (64 + 64) + (64 + 64) + (128 + 64))  # rank 8, four layers, by hand
    assert lora_params(moe, None, 8) == attention


def test_lora_targets_every_projection_named():
    """rank x (in + out) per target: by hand for the small Qwen3.5 text, targets q_proj and out_proj:
    one full-attention layer's q_proj 64 -> 128 (no output gate), three linear layers' out_proj 32 -> 64."""
    text = {**SMALL_TEXT, **SMALL_LINEAR}
    assert lora_params(text, ["q_proj", "out_proj"], 8) == 8 * (64 + 128) + 3 * 8 * (32 + 64)


def test_full_on_an_h100_by_hand(monkeypatch, tmp_path):
    """The fast instrument starts with the reference released: 6,355,477,856 bytes beside vLLM's
    76,526,653,539 (test_vllm_memory.py), less 2,304 tokens x 248,320 x 10 = 5,721,292,800 bytes of
    prompt log-probs, leaves 634,185,056. The reference: 4,205,751,296 x 2 = 8,411,502,592 bytes
    of bf16 weights; kept beside vLLM it would leave 6,355,477,856 - 8,411,502,592 < 0."""
    rows = {r["stage"]: r for r in memory_plan(full(monkeypatch, tmp_path), QWEN35, H100)}
    fast, reference = rows["parity gate: fast (vLLM)"], rows["parity gate: reference"]
    assert (fast["resident_bytes"], fast["vllm_bytes"], fast["step_bytes"], fast["free_bytes"]) == (
        0, 76_526_653_539, 5_721_292_800, 634_185_056)
    assert fast["fits"] and "2,304 tokens/step" in fast["step"]
    assert reference["resident_bytes"] == 8_411_502_592 and reference["vllm_bytes"] is None
    assert rows["score bank"]["resident_bytes"] == 8_411_502_592  # full scores the bank with the reference
    assert rows["harvest (trace bank)"]["free_bytes"] == 6_355_477_856 and all(r["fits"] for r in rows.values())
    notes = memory_notes(full(monkeypatch, tmp_path), QWEN35, "registered", H100)
    assert any("vLLM's start would be 1.91 GiB short" in n for n in notes)  # 2,056,024,736 bytes


def test_a_40_gib_device_cannot_cap_the_scoring_step(monkeypatch, tmp_path):
    """0.1 x 40 GiB less two contexts leaves 2 GiB: 864 tokens of log-probs, under the floor of
    1,024, so the plan shows a whole record's 37 GiB step and says it does not fit."""
    rows = {r["stage"]: r for r in memory_plan(full(monkeypatch, tmp_path), QWEN35, 40 << 30)}
    assert not rows["parity gate: fast (vLLM)"]["fits"]
    assert rows["parity gate: fast (vLLM)"]["step_bytes"] == 16_000 * 248_320 * 10


@pytest.mark.parametrize("args, shows, hides", [
    (["--profile", "full"], ["memory on 79.19 GiB (h100", "2,304 tokens/step", "reference released"], []),
    (["--profile", "full", "--gpu", "h200"], ["memory on 139.80 GiB (h200", "5,120 tokens/step"], []),
    (["--profile", "full", "--gpu-memory-gib", "40"], ["memory on 40.00 GiB:", "NO"], []),
    (["--profile", "smoke"], [], ["memory on"]),
    (["--profile", "smoke", "--gpu", "h100"], ["the embedded model is built and run on CPU"], [])])
def test_the_command_prints_the_memory_plan(monkeypatch, tmp_path, capsys, args, shows, hides):
    monkeypatch.setenv("APSFT_MODEL_DIR", str(tmp_path / "absent"))
    assert main(["plan", *args, "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert all(s in out for s in shows) and not any(h in out for h in hides), out
