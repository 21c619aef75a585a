"""scripts/gpu_rehearsal.py: its JSON written phase by phase with each phase's status, GPU memory handed
back and measured between phases, and the registered dimensions it builds on a GPU machine. Its whole
--tiny run (the same code on the CPU) runs once, in the vLLM lane, under the GPU lock's transformers and
peft, the libraries the GPU machine runs it with (tests/vllm_lane/test_vllm_gpu_rehearsal.py)."""

import importlib.util
import json

import pytest
import torch

from apsft_dagster.core.gpu_rehearsal.journal import Journal, PhaseSkipped
from apsft_dagster.core.paths import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "gpu_rehearsal.py"
PHASES = ["snapshot", "scoring", "training", "merge", "probe", "transformers_generation", "vllm_generation",
          "vllm_prompt_logprobs"]


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_rehearsal_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_failed_phase_is_recorded_at_once_and_the_phases_after_it_still_run(tmp_path, monkeypatch):
    """The script's own sequence in this process, each measurement replaced by a stand-in: training
    fails, and the generation phase that runs after it finds the file already holding the earlier
    figures and training's error (the rehearsal used to write its JSON only at the very end)."""
    script, out, seen = load_script(), tmp_path / "rehearsal.json", {}
    monkeypatch.setenv("APSFT_MODEL_DIR", str(tmp_path / "unused"))  # restored after: the script relocates it
    monkeypatch.setenv("APSFT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # --tiny pins one thread: not this process's

    def snapshot(raw, folder, *args, **kwargs):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")  # what the full profile's model.path must hold
        return {"parameters": 7, "build_and_save_s": 0.5, "tasks": [], "tokenizer_ids": 5, "embedding_rows": 8}

    def training(*args):
        raise RuntimeError("injected: CUDA out of memory in the backward pass")

    def generation(*args):
        seen.update(json.loads(out.read_text()))
        return {"tokens_per_s": 11.0}

    def vllm(*args):
        raise PhaseSkipped("no vLLM in this test")

    stand_ins = {"build_snapshot": snapshot, "time_scoring": lambda *a: {"256": {"tokens_per_s": 3.0}},
                 "time_training": training, "time_transformers_generation": generation,
                 "time_vllm_generation": vllm, "time_vllm_prompt_logprobs": vllm}
    for name, stand_in in stand_ins.items():
        monkeypatch.setattr(script, name, stand_in, raising=False)
    assert script.main(["--tiny", "--out", str(out)]) == 1  # a phase failed
    assert seen["scoring"] == {"256": {"tokens_per_s": 3.0}} and seen["parameters"] == 7
    assert [seen["phases"][p]["status"] for p in PHASES[:4]] == ["done", "done", "failed", "skipped"]
    assert seen["phases"]["training"]["error"] == "RuntimeError: injected: CUDA out of memory in the backward pass"
    assert ", in training\n" in seen["phases"]["training"]["traceback"] and seen["finished"] is False
    result = json.loads(out.read_text())
    assert [result["phases"][p]["status"] for p in PHASES] == ["done", "done", "failed", "skipped", "skipped",
                                                               "done", "skipped", "skipped"]
    assert result["phases"]["probe"]["reason"] == "needs merge, which did not finish"
    assert result["phases"]["merge"]["reason"] == "needs training, which did not finish" and "merge" not in result
    assert result["transformers_generation"] == {"tokens_per_s": 11.0} and "training" not in result
    assert result["vllm"] == {"measured": False, "reason": "vllm_generation skipped: no vLLM in this test; "
                                                           "vllm_prompt_logprobs skipped: no vLLM in this test"}
    assert result["finished"] is True and result["format"] == "apsft-gpu-rehearsal/1"


class FakeCuda:
    """torch.cuda as the journal sees it on a GPU machine: 40 GiB of 80 free once the cache is emptied."""

    def __init__(self):
        self.calls, self.cached = [], 30

    def is_available(self):
        return True

    def empty_cache(self):
        self.calls.append("empty_cache")
        self.cached = 0

    def mem_get_info(self):
        self.calls.append("mem_get_info")
        return (40 - self.cached) << 30, 80 << 30

    def reset_peak_memory_stats(self):
        self.calls.append("reset_peak")

    def max_memory_allocated(self):
        return 12 << 30


def test_every_phase_starts_with_the_memory_handed_back_and_records_it(tmp_path, monkeypatch):
    cuda = FakeCuda()
    monkeypatch.setattr(torch, "cuda", cuda)
    journal = Journal(tmp_path / "r.json", {"format": "x"}, log=lambda m: None)

    def holds_cache():
        cuda.cached = 30  # what a dropped model leaves in torch's cache
        return {"a": {"x": 1}}

    journal.run("first", holds_cache)
    journal.run("second", lambda: {"a": {"y": 2}})
    doc = json.loads((tmp_path / "r.json").read_text())
    assert cuda.calls == ["empty_cache", "reset_peak", "mem_get_info"] * 2
    for name in ("first", "second"):
        entry = doc["phases"][name]
        figures = entry["free_gpu_memory_gib"], entry["total_gpu_memory_gib"], entry["peak_gpu_memory_gib"]
        assert figures == (40, 80, 12)
    assert doc["a"] == {"x": 1, "y": 2}  # two phases may fill one key (vllm)


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


@pytest.mark.parametrize("tiny", [True, False])
def test_both_sizes_are_shapes_vllm_accepts(tiny):
    """vLLM asserts the M-RoPE split fills the rotary half (rotary_embedding/mrope.py), its CPU backend
    takes these attention head sizes and, for the gated delta rule, key/value heads of 64 or 128 only
    (docs/vllm.md); transformers checks none of it, so a bad tiny config would pass every CPU phase."""
    from apsft_dagster.core.config import VLLM_CPU_HEAD_DIMS
    from apsft_dagster.core.gpu_rehearsal.snapshot import model_config

    text = model_config(tiny)["text_config"]
    rope = text["rope_parameters"]
    assert sum(rope["mrope_section"]) * 2 == text["head_dim"] * rope["partial_rotary_factor"]
    assert text["head_dim"] in VLLM_CPU_HEAD_DIMS
    assert {text["linear_key_head_dim"], text["linear_value_head_dim"]} <= {64, 128}
