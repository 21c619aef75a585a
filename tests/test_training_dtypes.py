"""The training dtypes (core/training/loop.py): the NF4 base keeps its unquantized weights in bf16
(peft's prepare_model_for_kbit_training would make them fp32), the decoder runs under an autocast
to the base's load dtype, so LoRA's matmuls run in bf16 even on an fp32-upcast base, and on CPU
float32 nothing changes. CUDA's policy runs here as CPU autocast: the device type is the model's."""

import contextlib
import sys
import types
import warnings

import pytest
import torch

from apsft_dagster.core.config import load_config
from apsft_dagster.core.training.loop import attach_adapter, compute_context, load_base, record_loss
from apsft_dagster.core.training.loss import chunked_nll
from apsft_dagster.core.training.records import Example
from tiny import tiny_model

CHUNK = 4


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("dtypes") / "base", 0, layers=2)


def load(path, dtype):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)


def example(vocab: int) -> Example:
    ids = tuple((7 * i + 3) % vocab for i in range(12))
    return Example(0, ids, (0,) * 4 + (1,) * 4 + (2,) * 4, (0.0,) * 4 + (0.5,) * 4 + (1.0,) * 4, False)


def lora_outputs(model) -> dict[str, set]:
    """Hooks on every LoRA A and B: the dtype each one's matmul produced, by kind."""
    seen = {"lora_A": set(), "lora_B": set()}
    for name, module in model.named_modules():
        kind = name.split(".")[-2] if name.endswith(".default") else None
        if kind in seen and isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda m, i, out, kind=kind: seen[kind].add(out.dtype))
    return seen


def test_the_nf4_base_keeps_its_unquantized_weights_in_bf16_frozen(base_dir, monkeypatch):
    from peft import prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM

    asked, real = {}, AutoModelForCausalLM.from_pretrained

    def from_pretrained(path, **kwargs):  # bitsandbytes needs CUDA: the tiny base in bf16 stands in for NF4
        asked.update(kwargs)
        return real(path, dtype=kwargs["dtype"])

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "bitsandbytes", types.ModuleType("bitsandbytes"))
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", from_pretrained)
    compute = load_config("smoke").compute.model_copy(update={"device": "cuda", "dtype": "bfloat16",
                                                               "quantization": "nf4"})
    model = load_base(base_dir, compute)
    quant = asked["quantization_config"]
    assert (quant.load_in_4bit, quant.bnb_4bit_quant_type) == (True, "nf4")
    assert quant.bnb_4bit_compute_dtype == asked["dtype"] == torch.bfloat16
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}  # the embedding, the norms: none upcast
    assert not any(p.requires_grad for p in model.parameters()) and model.config.use_cache is False
    # the control: the call load_base no longer makes upcasts every one of them
    upcast = prepare_model_for_kbit_training(real(base_dir, dtype=torch.bfloat16), use_gradient_checkpointing=False)
    assert {p.dtype for p in upcast.parameters()} == {torch.float32}


@pytest.mark.parametrize("upcast", [False, True], ids=["bf16 base", "fp32-upcast base"])
def test_lora_runs_in_bf16_under_the_policy_with_fp32_master_weights(base_dir, upcast):
    from peft import prepare_model_for_kbit_training

    config = load_config("smoke")
    base = load(base_dir, torch.bfloat16)  # as load_base leaves it on CUDA (config.dtype bf16)
    if upcast:  # the worst case: every unquantized weight fp32, as prepare_model_for_kbit_training leaves them
        base = prepare_model_for_kbit_training(base, use_gradient_checkpointing=False)
    model = attach_adapter(base, config.training, 42)[0]
    seen = lora_outputs(model)
    total, _, _ = record_loss(model, example(base.config.vocab_size), CHUNK)
    assert seen == {"lora_A": {torch.bfloat16}, "lora_B": {torch.bfloat16}}
    assert total.dtype == torch.float32  # the loss outside the autocast
    total.backward()
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    assert {p.dtype for p in lora} == {p.grad.dtype for p in lora} == {torch.float32}  # AdamW's master copy
    assert all(torch.isfinite(p.grad).all() for p in lora) and any(p.grad.abs().sum() > 0 for p in lora)


def test_cpu_float32_is_untouched_bit_for_bit(base_dir):
    config = load_config("smoke")
    assert isinstance(compute_context("cpu", torch.float32), contextlib.nullcontext)
    model = attach_adapter(load_base(base_dir, config.compute), config.training, 42)[0]
    seen = lora_outputs(model)
    ex = example(model.get_base_model().config.vocab_size)
    total, weight, nll = record_loss(model, ex, CHUNK)
    assert seen == {"lora_A": {torch.float32}, "lora_B": {torch.float32}}
    base = model.get_base_model()  # the same sums by hand, with no context at all
    ids = torch.tensor(ex.input_ids)
    hidden = base.get_decoder()(input_ids=ids[None], use_cache=False).last_hidden_state[0]
    by_hand = chunked_nll(hidden, base.get_output_embeddings().weight, ids, torch.tensor(ex.weights), CHUNK)
    assert torch.equal(total, by_hand[0]) and weight == float(by_hand[1]) and torch.equal(nll, by_hand[2])


def test_the_policy_autocasts_to_the_load_dtype_on_the_models_device():
    with warnings.catch_warnings():  # torch disables a CUDA autocast on a machine without CUDA, and says so
        warnings.simplefilter("ignore", UserWarning)
        cuda = compute_context("cuda", torch.bfloat16)
    assert isinstance(cuda, torch.autocast) and (cuda.device, cuda.fast_dtype) == ("cuda", torch.bfloat16)
    assert isinstance(compute_context("cpu", None), contextlib.nullcontext)  # a model built, not loaded


def test_gradient_checkpointing_is_enabled_without_transformers_deprecation(base_dir):
    """`full` trains with gradient checkpointing (here on smoke's training settings): under .venv's
    transformers the renamed call, which warns nothing (the old name printed a FutureWarning once per
    adapter), and checkpointing is on either way."""
    training = load_config("smoke").training.model_copy(update={"gradient_checkpointing": True})
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        model = attach_adapter(load(base_dir, torch.float32), training, 0)[0]
    assert model.get_base_model().is_gradient_checkpointing
