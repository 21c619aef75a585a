"""The engine arguments a snapshot's config.json decides (core/engines/vllm_engine.py
`snapshot_choices`), through `llm_arguments`, with no vLLM: a Qwen3.5 conditional-generation
snapshot starts language-only; its Gated DeltaNet prefill runs on FlashInfer only where nvcc is
found (the JIT needs it), else on Triton/FLA; a CPU engine gets no CUDA-only argument; a Qwen3
text snapshot gets nothing."""

import json

import pytest

from apsft_dagster.core.config import Compute, load_config
from apsft_dagster.core.engines.vllm_engine import find_nvcc, llm_arguments
from apsft_dagster.core.paths import CONFIG_DIR
from tests.fake_cuda import cuda_home

CUDA = Compute(device="cuda", dtype="bfloat16", quantization="nf4", threads=8)
ENGINE = load_config("smoke").vllm.model_copy(update={"kv_cache_bytes": None})
QWEN35 = json.loads((CONFIG_DIR / "models" / "qwen3_5_4b.config.json").read_text())
QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "head_dim": 128,
         "num_hidden_layers": 36}
NO_NVCC, NVCC = (lambda: None), (lambda: "/usr/local/cuda/bin/nvcc")
# The fields of the locked vLLM's EngineArgs (vllm/engine/arg_utils.py; release: requirements/gpu.in) passed here.
ENGINE_ARGS_FIELDS = {"model", "tokenizer", "dtype", "max_model_len", "enforce_eager", "gpu_memory_utilization",
                      "enable_prefix_caching", "seed", "kv_cache_memory_bytes", "max_num_batched_tokens",
                      "enable_chunked_prefill", "language_model_only", "gdn_prefill_backend"}
GDN_BACKENDS = {"flashinfer", "triton", "cutedsl", "aiter_flydsl"}  # EngineArgs.gdn_prefill_backend's Literal


def snapshot(tmp_path, config: dict) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def choices(arguments: dict) -> dict:
    return {k: arguments[k] for k in ("language_model_only", "gdn_prefill_backend") if k in arguments}


def test_a_qwen35_snapshot_starts_language_only_with_a_gdn_backend_that_needs_no_nvcc(tmp_path):
    path = snapshot(tmp_path, QWEN35)
    assert choices(llm_arguments(path, CUDA, ENGINE, nvcc=NO_NVCC)) == {"language_model_only": True,
                                                                       "gdn_prefill_backend": "triton"}
    assert choices(llm_arguments(path, CUDA, ENGINE, nvcc=NVCC)) == {"language_model_only": True,
                                                                    "gdn_prefill_backend": "flashinfer"}


def test_the_snapshot_decides_not_the_profile(tmp_path):
    """A Qwen3 text snapshot under the same profile: no choice at all, nvcc or not; a text-only
    Qwen3.5 (`Qwen3_5ForCausalLM`, no vision tower) keeps its GDN backend but is not multimodal."""
    assert choices(llm_arguments(snapshot(tmp_path, QWEN3), CUDA, ENGINE, nvcc=NVCC)) == {}
    text_only = {**QWEN35["text_config"], "architectures": ["Qwen3_5ForCausalLM"]}
    assert choices(llm_arguments(snapshot(tmp_path, text_only), CUDA, ENGINE, nvcc=NO_NVCC)) == {
        "gdn_prefill_backend": "triton"}
    assert choices(llm_arguments(str(tmp_path / "not-here-yet"), CUDA, ENGINE, nvcc=NVCC)) == {}


def test_on_cpu_no_cuda_only_argument_and_no_nvcc_probe(tmp_path):
    smoke = load_config("smoke")

    def probe():
        raise AssertionError("nvcc is looked for on CUDA only")

    arguments = llm_arguments(snapshot(tmp_path, QWEN35), smoke.compute, smoke.vllm, nvcc=probe)
    assert choices(arguments) == {"language_model_only": True}  # a MultiModalConfig field, on every platform
    assert arguments["kv_cache_memory_bytes"] == smoke.vllm.kv_cache_bytes


def test_every_argument_is_a_field_of_vllm_0_32_engine_args(tmp_path):
    arguments = llm_arguments(snapshot(tmp_path, QWEN35), CUDA, load_config("smoke").vllm, max_num_batched_tokens=2304,
                              nvcc=NVCC)
    assert set(arguments) == ENGINE_ARGS_FIELDS
    assert arguments["gdn_prefill_backend"] in GDN_BACKENDS
    assert arguments["max_num_batched_tokens"] == 2304 and arguments["enable_chunked_prefill"] is True


@pytest.mark.parametrize("reported, torch_cuda, usable", [("13.0", "13.0", True), ("12.4", "13.0", False),
                                                         (None, "13.0", False), ("13.0", None, False)])
def test_the_jit_gets_an_nvcc_only_of_torchs_cuda_major(tmp_path, monkeypatch, reported, torch_cuda, usable):
    """FlashInfer's JIT compiles against the installed torch: an nvcc of another CUDA major, none, or a CPU
    torch means triton (found as apsft doctor finds it: CUDA_HOME first)."""
    import torch

    home = cuda_home(tmp_path / "cuda", reported)
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setattr(torch.version, "cuda", torch_cuda)
    assert find_nvcc() == (str(home / "bin" / "nvcc") if usable else None)


@pytest.mark.parametrize("layer_types, backend", [(["full_attention"] * 4, None),
                                                  (["linear_attention", "full_attention"], "triton")])
def test_only_linear_attention_layers_get_a_gdn_backend(tmp_path, layer_types, backend):
    config = {**QWEN35, "text_config": {**QWEN35["text_config"], "layer_types": layer_types}}
    assert llm_arguments(snapshot(tmp_path, config), CUDA, ENGINE, nvcc=NO_NVCC).get("gdn_prefill_backend") == backend
