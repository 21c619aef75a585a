"""scripts/gpu_rehearsal.py: its --tiny run (the same code on the CPU) and the registered
dimensions it builds on a GPU machine."""

import json
import os
import subprocess
import sys

import pytest
import torch

from apsft_dagster.core.paths import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "gpu_rehearsal.py"


@pytest.mark.slow
def test_the_tiny_rehearsal_measures_every_path(tmp_path):
    out = tmp_path / "rehearsal.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--out", str(out)], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert (result["tiny"], result["device"], result["dtype"]) == (True, "cpu", "float32")
    assert set(result["scoring"]) == {"256", "512"}
    for length, figures in result["scoring"].items():
        assert figures["tokens"] >= int(length) and figures["tokens_per_s"] > 0
    training = result["training"]
    assert training["quantization"] == "none" and training["base"] == "float32 base on cpu"
    assert training["tokens_per_s"] > 0 and training["record_tokens"] >= 512
    # 3 gated delta-rule blocks x 8 projections + 1 full-attention block x 7
    assert training["lora_pairs"] == result["merge"]["lora_pairs"] == result["merge"]["changed_tensors"] == 31
    generation = result["transformers_generation"]
    assert generation["new_tokens"] == 8 * 32 and generation["tokens_per_s"] > 0  # random weights never stop
    assert result["vllm"]["measured"] is False and "tests/vllm_lane" in result["vllm"]["reason"]
    assert set(result["feeds"]) >= {"training.tokens_per_s", "merge.seconds"}
    assert (result["tokenizer_ids"], result["embedding_rows"]) == (248077, 248320)  # Qwen3.5's real vocabulary
    env = {**os.environ, "APSFT_STATE_DIR": str(tmp_path / "state")}
    plan = subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "plan", "--profile", "full", "--rehearsal",
                           str(out)], capture_output=True, text=True, env=env)
    assert plan.returncode == 0, plan.stderr
    assert f"rehearsal {out.name} on cpu (--tiny" in plan.stdout and "training.tokens_per_s" in plan.stdout


def test_the_registered_dimensions_are_qwen3_5_4b():
    """The config the GPU run builds: 32 hybrid blocks (every fourth full attention), 4.54 B
    parameters with the vision tower, counted on the meta device (no weights allocated)."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    raw = json.loads((PROJECT_ROOT / "configs" / "models" / "qwen3_5_4b.config.json").read_text())
    config = Qwen3_5Config(**{k: v for k, v in raw.items() if k not in ("architectures", "model_type")})
    text = config.text_config
    assert (text.num_hidden_layers, text.hidden_size, text.head_dim, text.vocab_size) == (32, 2560, 256, 248320)
    assert [i for i, t in enumerate(text.layer_types) if t == "full_attention"] == list(range(3, 32, 4))
    with torch.device("meta"):
        model = Qwen3_5ForConditionalGeneration(config)
    parameters = sum(p.numel() for p in model.parameters())
    assert 4.4e9 < parameters < 4.7e9, parameters
