"""The vLLM engine and instrument against a fake `vllm` module, on any machine (the vLLM lane,
tests/vllm_lane/, runs the real one in .venv-vllm).

The fake records what the code passes to `LLM`, `SamplingParams` and `TokensPrompt`, and answers
with objects shaped like vLLM's RequestOutput / CompletionOutput: `prompt_logprobs` is a list whose
entry 0 is None and entry i a dict token id -> Logprob for prompt token i.
"""

import gc
import json
import sys
import types
import weakref
from dataclasses import dataclass

import pytest
import torch

from apsft_dagster.core.config import Compute, Sampling, load_config
from apsft_dagster.core.embedded.tokenizer import train_tokenizer
from apsft_dagster.core.engines.base import Completion, GenerationRequest
from apsft_dagster.core.engines.vllm_engine import (
    VllmEngine,
    check_cpu_snapshot,
    completion,
    llm_arguments,
    snapshot_head_dim,
    vllm_environment,
)
from apsft_dagster.core.engines.vllm_scoring import VllmInstrument, prompt_logprob_sums
from apsft_dagster.core.errors import ModelDirectoryError
from apsft_dagster.core.evaluation.generations import engine_identity
from apsft_dagster.core.protocol import STOP_TOKENS, format_answer, format_prompt, format_record, locate_spans

CUDA = Compute(device="cuda", dtype="bfloat16", quantization="none", threads=1)
H100 = 85_029_615_043  # 79.19 GiB, an H100 80GB's total_memory as torch reports it
ENGINE = load_config("smoke").vllm


@dataclass
class Logprob:
    logprob: float


def out(token_ids, finish_reason, stop_reason=None):
    return types.SimpleNamespace(token_ids=list(token_ids), finish_reason=finish_reason, stop_reason=stop_reason)


def table_value(position: int, token: int) -> float:
    """A known, position- and token-dependent log-prob (dyadic, so sums are exact)."""
    return -(position % 13 + 1) / 8 - (token % 7) / 64


class FakeLLM:
    events: list = []

    def __init__(self, **kwargs):
        self.kwargs, self.calls, self.script = kwargs, [], None
        core = types.SimpleNamespace(shutdown=lambda: FakeLLM.events.append("engine_core_shutdown"))
        self.llm_engine = types.SimpleNamespace(engine_core=core)

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.calls.append((prompts, sampling_params, use_tqdm))
        if self.script is not None:
            return [types.SimpleNamespace(outputs=outputs, prompt_logprobs=None) for outputs in self.script]
        # Scoring: every prompt token's own logprob, plus a decoy entry (top-1 of another token).
        results = []
        for prompt in prompts:
            ids = prompt["prompt_token_ids"]
            table = [None] + [{ids[i]: Logprob(table_value(i, ids[i])), -1: Logprob(-0.001)}
                              for i in range(1, len(ids))]
            results.append(types.SimpleNamespace(outputs=[out([0], "length")], prompt_logprobs=table))
        return results


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


@pytest.fixture
def fake_vllm(monkeypatch):
    """`vllm`, `vllm.inputs` and `vllm.distributed.parallel_state` in sys.modules; records cleanups."""
    vllm, inputs = types.ModuleType("vllm"), types.ModuleType("vllm.inputs")
    distributed = types.ModuleType("vllm.distributed")
    parallel_state = types.ModuleType("vllm.distributed.parallel_state")
    vllm.LLM, vllm.SamplingParams, vllm.inputs, vllm.__version__ = FakeLLM, FakeSamplingParams, inputs, "0.0.fake"
    inputs.TokensPrompt = lambda **kwargs: dict(kwargs)  # vLLM's TokensPrompt is a TypedDict
    events = []
    monkeypatch.setattr(FakeLLM, "events", events)
    parallel_state.cleanup_dist_env_and_memory = lambda: events.append("cleanup_dist_env")
    vllm.distributed, distributed.parallel_state = distributed, parallel_state
    for name, module in {"vllm": vllm, "vllm.inputs": inputs, "vllm.distributed": distributed,
                         "vllm.distributed.parallel_state": parallel_state}.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: events.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(total_memory=H100))
    return events


@pytest.fixture(scope="module")
def tok():
    texts = [format_record(f"Count {i} salt.", f"Step {i}: salt {i} + 1 = {i + 1}.\n", str(i + 1)) for i in range(200)]
    return train_tokenizer(texts, vocab_size=400)


@pytest.fixture(scope="module")
def model_dir(tok, tmp_path_factory):
    """The tokenizer and a Qwen3-layout config.json: a text model, no engine choices."""
    path = tmp_path_factory.mktemp("model")
    tok.save_pretrained(path)
    (path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                                  "vocab_size": 400, "head_dim": 32}))
    return str(path)


def test_completion_stop_token_kept_appended_or_length():
    close, end = 7, 9
    assert completion(out([4, 5, close], "stop", close), (close, end)) == Completion((4, 5, close), "stop")
    # a vLLM version that leaves the matched stop token out of token_ids
    assert completion(out([4, 5], "stop", end), (close, end)) == Completion((4, 5, end), "stop")
    assert completion(out([], "stop", close), (close, end)) == Completion((close,), "stop")
    assert completion(out([4, 5, 6], "length"), (close, end)) == Completion((4, 5, 6), "length")
    assert completion(out([4, end], "stop", None), (close, end)) == Completion((4, end), "stop")  # EOS path
    with pytest.raises(RuntimeError, match="abort"):
        completion(out([4], "abort"), (close, end))


def test_engine_passes_exact_prompts_and_sampling_params(fake_vllm, tok, model_dir):
    engine = VllmEngine(model_dir, STOP_TOKENS, CUDA, ENGINE)
    close, end = tok.convert_tokens_to_ids(list(STOP_TOKENS))
    assert engine.stop_token_ids == (close, end)
    assert engine.llm.kwargs["model"] == model_dir and engine.llm.kwargs["enable_prefix_caching"] is False

    first = tuple(tok(format_prompt("Count 3 salt."), add_special_tokens=False)["input_ids"])
    requests = [GenerationRequest(first, 2, 30, 11), GenerationRequest(first + (5, 6), 1, 8, 2**62 + 3)]
    engine.llm.script = [[out([5, 6, close], "stop", close), out([5, 6], "stop", end)], [out([1] * 8, "length")]]
    sampling = Sampling(temperature=0.6, top_p=0.8, top_k=7)
    results = engine.generate(requests, sampling)

    assert results == [[Completion((5, 6, close), "stop"), Completion((5, 6, end), "stop")],
                       [Completion((1,) * 8, "length")]]
    [(prompts, params, use_tqdm)] = engine.llm.calls
    assert prompts == [{"prompt_token_ids": list(r.prompt_ids)} for r in requests]
    assert use_tqdm is False
    for request, p in zip(requests, params):
        assert p.kwargs == {"n": request.n, "seed": request.seed, "temperature": 0.6, "top_p": 0.8, "top_k": 7,
                            "max_tokens": request.max_tokens, "stop_token_ids": [close, end],
                            "ignore_eos": True, "skip_special_tokens": False}


def test_a_request_may_stop_only_at_the_end_of_turn(fake_vllm, tok, model_dir):
    """Evaluation's requests replace the engine's stops: `</think>` does not end them, `<|im_end|>` does."""
    engine = VllmEngine(model_dir, STOP_TOKENS, CUDA, ENGINE)
    close, end = engine.stop_token_ids
    prompt = tuple(tok(format_prompt("Count 3 salt."), add_special_tokens=False)["input_ids"])
    engine.llm.script = [[out([5, close, 6, end], "stop", end)]]
    [[completion]] = engine.generate([GenerationRequest(prompt, 1, 30, 0, stop_token_ids=(end,))],
                                     Sampling(temperature=0.0, top_p=1.0, top_k=0))
    assert completion == Completion((5, close, 6, end), "stop")
    [(_, [params], _)] = engine.llm.calls
    assert params.kwargs["stop_token_ids"] == [end] and params.kwargs["temperature"] == 0.0


def _items():
    prompt = format_prompt("Count 3 salt.")
    return [(prompt, "Step 3: salt 3 + 1 = 4.\n", format_answer("4")), (prompt, "", format_answer("4")),
            (prompt, "Step 1.\n", format_answer("12"))]


def _brute_force(tok, prompt, thought, answer) -> dict:
    """Sum the table over tokens starting at/after the answer's (boundary's) first character."""
    boundary_at, answer_at = len(prompt + thought), len(prompt + thought + "</think>\n\nANSWER:")
    enc = tok(prompt + thought + "</think>\n\nANSWER:" + answer, add_special_tokens=False, return_offsets_mapping=True)
    pairs = zip(enc["input_ids"], enc["offset_mapping"])
    picked = [(start, table_value(i, t)) for i, (t, (start, _)) in enumerate(pairs)]
    answer_lp = [v for start, v in picked if start >= answer_at]
    joint_lp = [v for start, v in picked if start >= boundary_at]
    return {"answer_logprob": sum(answer_lp), "joint_logprob": sum(joint_lp),
            "n_answer_tokens": len(answer_lp), "n_joint_tokens": len(joint_lp)}


def test_instrument_sums_match_brute_force(fake_vllm, tok, model_dir):
    instrument = VllmInstrument(model_dir, CUDA, ENGINE)
    assert instrument.llm.kwargs["enable_prefix_caching"] is False
    results = instrument.score(_items())
    assert results == [_brute_force(tok, *item) for item in _items()]
    assert all(r["n_answer_tokens"] >= 1 and r["n_joint_tokens"] > r["n_answer_tokens"] for r in results)
    [(prompts, params, _)] = instrument.llm.calls
    assert params.kwargs["prompt_logprobs"] >= 0 and params.kwargs["max_tokens"] == 1
    assert prompts == [{"prompt_token_ids": locate_spans(tok, *item).input_ids} for item in _items()]


def test_prompt_logprob_sums_refuses_a_misaligned_table(tok):
    spans = locate_spans(tok, *_items()[0])
    table = [None] + [{t: Logprob(-1.0)} for t in spans.input_ids[1:]]
    assert prompt_logprob_sums(table, spans)["joint_logprob"] == -float(len(spans.input_ids) - spans.boundary.start)
    with pytest.raises(ValueError, match="prompt_logprobs has"):
        prompt_logprob_sums(table[1:], spans)


def test_close_releases_an_owned_llm(fake_vllm, model_dir):
    for owner in (VllmEngine(model_dir, STOP_TOKENS, CUDA, ENGINE), VllmInstrument(model_dir, CUDA, ENGINE)):
        fake_vllm.clear()
        llm = weakref.ref(owner.llm)
        owner.close()
        gc.collect()
        assert owner.llm is None and llm() is None
        assert fake_vllm == ["engine_core_shutdown", "cleanup_dist_env", "empty_cache"]


def test_from_llm_borrows_and_close_leaves_the_owner_running(fake_vllm, tok, model_dir):
    engine = VllmEngine(model_dir, STOP_TOKENS, CUDA, ENGINE)
    instrument = VllmInstrument.from_llm(engine.llm, engine.tokenizer)
    assert instrument.llm is engine.llm and instrument.tokenizer is engine.tokenizer
    assert instrument.score(_items()[:1]) == [_brute_force(tok, *_items()[0])]
    fake_vllm.clear()
    instrument.close()
    assert instrument.llm is None and engine.llm is not None
    assert fake_vllm == ["empty_cache"]  # a borrower never tears down vLLM's distributed state


def test_close_without_vllm_cleanup_api(fake_vllm, monkeypatch, model_dir):
    monkeypatch.delitem(sys.modules, "vllm.distributed.parallel_state")
    monkeypatch.delitem(sys.modules, "vllm.distributed")
    monkeypatch.delattr(sys.modules["vllm"], "distributed")
    engine = VllmEngine(model_dir, STOP_TOKENS, CUDA, ENGINE)
    engine.close()
    assert engine.llm is None and fake_vllm == ["engine_core_shutdown", "empty_cache"]


def test_llm_arguments_come_from_the_profile():
    smoke = load_config("smoke")
    args = llm_arguments("/m", smoke.compute, smoke.vllm)
    assert args == {"model": "/m", "tokenizer": "/m", "dtype": "float32", "max_model_len": 1024, "enforce_eager": True,
                    "gpu_memory_utilization": 0.9, "enable_prefix_caching": False, "seed": 0,
                    "kv_cache_memory_bytes": 1 << 30}
    on_cuda = llm_arguments("/m", CUDA, smoke.vllm.model_copy(update={"kv_cache_bytes": None, "enforce_eager": False}))
    assert "kv_cache_memory_bytes" not in on_cuda and on_cuda["enforce_eager"] is False


def test_vllm_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("APSFT_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    smoke = load_config("smoke")
    assert vllm_environment(smoke.compute, smoke.vllm) == {
        "VLLM_CACHE_ROOT": str(tmp_path / "vllm_cache"), "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CPU_KVCACHE_SPACE": None}  # unset: it would override vllm.kv_cache_bytes
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/elsewhere")
    own_process = smoke.vllm.model_copy(update={"in_process": False})
    assert vllm_environment(CUDA, own_process) == {"VLLM_CACHE_ROOT": "/elsewhere",
                                                   "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}


@pytest.mark.parametrize("config, head_dim", [({"head_dim": 16, "hidden_size": 64, "num_attention_heads": 2}, 16),
                                              ({"hidden_size": 256, "num_attention_heads": 4}, 64),
                                              ({"text_config": {"head_dim": 32}, "vision_config": {}}, 32)])
def test_head_dim_is_read_and_checked_before_vllm_starts(tmp_path, config, head_dim):
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert snapshot_head_dim(tmp_path) == head_dim
    if head_dim == 16:
        with pytest.raises(ModelDirectoryError, match=r"config\.json: head_dim 16 is not one vLLM's CPU attention"):
            check_cpu_snapshot(tmp_path)
    else:
        check_cpu_snapshot(tmp_path)


def test_the_cache_key_names_the_engine_version(fake_vllm, model_dir):
    """vLLM's CPU build is the distribution vllm-cpu: the version comes from the module itself."""
    assert engine_identity(VllmEngine(model_dir, STOP_TOKENS, CUDA, ENGINE)) == "VllmEngine 0.0.fake"
    assert engine_identity(types.SimpleNamespace()) == "SimpleNamespace unknown"


def test_the_instrument_caps_its_step_on_cuda_only(fake_vllm, model_dir):
    """On CUDA the scoring instrument's steps are capped so their prompt log-probs fit beside vLLM's
    reservation (core/engines/vllm_memory.py): by hand, an H100's 85,029,615,043 bytes less
    ceil(0.9 x that) = 76,526,653,539 and one CUDA context (in_process) of 1,073,741,824 leave
    7,429,219,680 bytes; a token's log-probs over this model's 400 rows take 4,000 bytes; 1,857,304
    tokens, in steps of 256: 1,857,280. The generation engine is not capped."""
    on_cuda = VllmInstrument(model_dir, CUDA, ENGINE).llm.kwargs
    assert on_cuda["max_num_batched_tokens"] == 1_857_280 and on_cuda["enable_chunked_prefill"] is True
    smoke = load_config("smoke")
    assert "max_num_batched_tokens" not in VllmInstrument(model_dir, smoke.compute, smoke.vllm).llm.kwargs
    assert "max_num_batched_tokens" not in VllmEngine(model_dir, STOP_TOKENS, CUDA, ENGINE).llm.kwargs


def test_a_qwen35_snapshot_starts_language_only_and_names_its_kernel(fake_vllm, tok, tmp_path, monkeypatch):
    """The engine's arguments and identity carry the snapshot's choices (test_vllm_engine_args.py
    covers the choice itself)."""
    from apsft_dagster.core.paths import CONFIG_DIR

    monkeypatch.setattr("apsft_dagster.core.engines.vllm_engine.find_nvcc", lambda: None)
    tok.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text((CONFIG_DIR / "models" / "qwen3_5_4b.config.json").read_text())
    engine = VllmEngine(str(tmp_path), STOP_TOKENS, CUDA, ENGINE)
    assert engine.llm.kwargs["language_model_only"] is True and engine.llm.kwargs["gdn_prefill_backend"] == "triton"
    assert engine.llm.kwargs == engine.arguments
    assert engine_identity(engine) == "VllmEngine 0.0.fake gdn_prefill_backend=triton language_model_only=True"
