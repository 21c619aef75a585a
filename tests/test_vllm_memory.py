"""vLLM's memory on a GPU (core/engines/vllm_memory.py) as hand-computed arithmetic, and the
scoring resource's turns: on CUDA with vLLM the reference model is gone before vLLM starts (its
start needs 0.9 of the device free) and comes back after it only if asked for; on CPU, or with
Transformers' fast instrument, the model stays. Fakes stand in for the model and for vLLM."""

import gc
import types
import weakref

import pytest

from apsft_dagster.core.engines.lifetime import one_instrument_resident
from apsft_dagster.core.engines.vllm_memory import (
    GIB,
    headroom,
    logprob_step_bytes,
    reservation,
    scoring_token_cap,
    v2_logprob_step_bytes,
)
from apsft_dagster.core.errors import DeviceError
from apsft_dagster.resources import ExperimentResource, ScoringResource

H100, H200 = 85_029_615_043, 150_109_106_995  # 79.19 and 139.80 GiB: torch's total_memory
VOCAB = 248_320  # Qwen3.5's LM head rows


def test_an_h100_at_0_9_caps_a_scoring_step_at_2304_tokens():
    """By hand: ceil(0.9 x 85,029,615,043) = 76,526,653,539 reserved; less two CUDA contexts
    (the stage's and vLLM's engine process, 2 x 1,073,741,824) 6,355,477,856 bytes are left; a token's
    log-probs over 248,320 rows take 248,320 x 10 = 2,483,200 bytes; 2,559 tokens, in steps of 256: 2,304."""
    assert reservation(H100, 0.9) == 76_526_653_539
    assert headroom(H100, 0.9, in_process=False) == 6_355_477_856
    assert logprob_step_bytes(1, VOCAB) == 2_483_200
    assert scoring_token_cap(H100, 0.9, VOCAB, in_process=False) == 2304
    assert scoring_token_cap(H100, 0.9, VOCAB, in_process=True) == 2816  # one context: 7,429,219,680 // 2,483,200
    assert scoring_token_cap(H200, 0.9, VOCAB, in_process=False) == 5120  # 12,863,427,051 bytes: 5,180 tokens


def test_a_whole_16000_token_record_in_one_step_would_not_fit():
    """Uncapped (vLLM's H100 default is 16,384 tokens a step), one 16,000-token record's log-probs
    take 16,000 x 248,320 x 10 bytes = 37.0 GiB on the V1 runner (its float32 log-softmax alone
    14.8 GiB); the V2 runner's 1,024-row chunks of bf16 logits 0.47 GiB."""
    assert logprob_step_bytes(16_000, VOCAB) == 39_731_200_000
    assert 16_000 * VOCAB * 4 / GIB == pytest.approx(14.80, abs=0.005)
    assert logprob_step_bytes(16_000, VOCAB) > headroom(H100, 0.9, in_process=False)
    assert v2_logprob_step_bytes(16_000, VOCAB) == 1024 * VOCAB * 2 == 508_559_360
    assert logprob_step_bytes(2304, VOCAB) <= headroom(H100, 0.9, in_process=False)


def test_no_room_is_refused_naming_the_setting():
    with pytest.raises(DeviceError, match=r"gpu_memory_utilization 0\.97 .* use a profile with a lower"):
        scoring_token_cap(H100, 0.97, VOCAB, in_process=False)


@pytest.mark.parametrize("device, backend, turns", [("cuda", "vllm", True), ("cpu", "vllm", False),
                                                    ("cuda", "transformers", False)])
def test_instruments_take_turns_only_on_cuda_with_vllm(device, backend, turns):
    assert one_instrument_resident(types.SimpleNamespace(device=device), backend) is turns


class Model:
    device = "fake"


class Experiment(ExperimentResource):
    """A config with just what the scoring resource reads."""

    device: str = "cuda"
    backend: str = "vllm"

    def config(self):
        return types.SimpleNamespace(compute=types.SimpleNamespace(device=self.device), profile="fake",
                                     harvest=types.SimpleNamespace(backend=self.backend), vllm="vllm-section",
                                     scoring=types.SimpleNamespace(reference_batch_tokens=None))

    def store(self):
        return None


@pytest.fixture
def fakes(monkeypatch):
    """Loads, releases and vLLM starts, in order; at each start whether a loaded model is alive."""
    events, models = [], []

    def load(path, compute):
        models.append(weakref.ref(model := Model()))
        events.append("load")
        return model, "tokenizer"

    class Vllm:
        def __init__(self, path, compute, engine):
            gc.collect()
            events.append(("vllm starts", "a model is alive" if any(m() for m in models) else "no model"))

        def close(self):
            events.append("vllm closed")

    monkeypatch.setattr("apsft_dagster.resources.scoring.load_causal_lm", load)
    monkeypatch.setattr("apsft_dagster.resources.scoring.preflight", lambda *a: None)
    monkeypatch.setattr("apsft_dagster.resources.scoring.base_model_path", lambda config, store: "/base")
    monkeypatch.setattr("apsft_dagster.resources.scoring.free_memory", lambda: (gc.collect(), events.append("free")))
    monkeypatch.setattr("apsft_dagster.core.engines.vllm_scoring.VllmInstrument", Vllm)
    return events


def test_on_cuda_the_reference_model_is_gone_before_vllm_starts(fakes):
    scorer = ScoringResource(experiment=Experiment(device="cuda"))
    scorer.instrument("reference")  # the gate's reference scores
    scorer.instrument("fast")
    assert fakes == ["load", "free", ("vllm starts", "no model")]
    fakes.clear()
    scorer.instrument("reference")  # the bank scored by the reference: vLLM goes, the model comes back
    assert fakes == ["vllm closed", "free", "load"]


def test_on_cpu_the_reference_model_stays_beside_vllm(fakes):
    scorer = ScoringResource(experiment=Experiment(device="cpu"))
    reference = scorer.instrument("reference")
    scorer.instrument("fast")
    assert fakes == ["load", ("vllm starts", "a model is alive")]
    assert scorer.instrument("reference") is reference and fakes.count("load") == 1


def test_transformers_fast_instrument_shares_the_reference_model_on_cuda(fakes):
    scorer = ScoringResource(experiment=Experiment(device="cuda", backend="transformers"))
    assert scorer.instrument("reference").model is scorer.instrument("fast").model
    assert fakes == ["load"]
