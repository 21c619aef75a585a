"""merge_snapshot on both layouts: the base's names, files and architecture, exactly one changed
weight per pair (checked against W + (alpha / r) B A computed here in float64), logits equal to
the adapter-wrapped model's, and refusals that name the tensor."""

import json

import pytest
import torch

from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import MergeError
from apsft_dagster.core.training.lora import lora_config, save_adapter, target_modules
from apsft_dagster.core.training.merge import merge_snapshot, read_tensors, tensor_files
from tiny import tiny_snapshot

LAYOUTS = ("qwen3_5", "qwen3")
IDS = torch.tensor([[5, 17, 42, 8, 99, 3, 250, 7, 31, 64, 12]])


def _adapter(base, out, seed: int = 3):
    """A non-trivial adapter for the base as AutoModelForCausalLM loads it (random B as well as A:
    a fresh adapter's delta is zero), saved as training saves it."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base)
    targets, expected = target_modules(model, load_config("smoke").training)
    config = lora_config(load_config("smoke").training.lora, targets)
    config.init_lora_weights = False
    torch.manual_seed(seed)
    wrapped = get_peft_model(model, config)
    out.mkdir()
    save_adapter(wrapped, out, "tiny", None)
    return out, expected


@pytest.fixture(scope="module", params=LAYOUTS)
def merged(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"merge-{request.param}")
    base = tiny_snapshot(root / "base", request.param)
    adapter, expected = _adapter(base, root / "adapter")
    counts = merge_snapshot(base, adapter, root / "merged")
    return request.param, base, adapter, root / "merged", counts, expected


def test_the_merged_snapshot_has_the_bases_names_shapes_files_and_architecture(merged):
    layout, base, _, out, counts, expected = merged
    names = tensor_files(base)
    assert tensor_files(out) == names  # the same names in the same files
    if layout == "qwen3_5":
        assert any(n.startswith("model.language_model.layers.") for n in names)
        assert any(n.startswith("model.visual.") for n in names) and "lm_head.weight" in names
    for path in sorted(base.iterdir()):
        if path.suffix != ".safetensors":
            assert (out / path.name).read_bytes() == path.read_bytes(), path.name
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == json.loads((base / "config.json").read_text())["architectures"]
    assert counts == {"lora_pairs": expected, "changed_tensors": expected, "unchanged_tensors": len(names) - expected}


def test_exactly_each_pairs_weight_changed_by_its_own_delta(merged):
    layout, base, adapter, out, counts, _ = merged
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    scaling = cfg["lora_alpha"] / cfg["r"]
    pairs, _ = read_tensors(adapter / "adapter_model.safetensors")
    before, _ = read_tensors(base / "model.safetensors")
    after, _ = read_tensors(out / "model.safetensors")
    expected = {}
    for key, a in pairs.items():
        if ".lora_A." in key:
            module = key.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
            name = f"{module}.weight" if layout == "qwen3" else \
                "model.language_model." + f"{module}.weight".removeprefix("model.")
            b = pairs[key.replace(".lora_A.", ".lora_B.")]
            expected[name] = before[name].double() + scaling * (b.double() @ a.double())
    assert len(expected) == counts["lora_pairs"]
    for name, tensor in before.items():
        if name in expected:
            assert not torch.equal(after[name], tensor), name
            torch.testing.assert_close(after[name].double(), expected[name], rtol=1e-6, atol=1e-6)
        else:
            assert torch.equal(after[name], tensor), name  # vision tower, norms, embeddings, head: bit for bit


def test_merged_logits_equal_the_adapter_wrapped_models_under_both_loaders(merged):
    import transformers
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    layout, base, adapter, out, _, _ = merged
    with torch.no_grad():
        wrapped = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).eval()
        want = wrapped(input_ids=IDS).logits
        plain = AutoModelForCausalLM.from_pretrained(base).eval()(input_ids=IDS).logits
        assert not torch.allclose(plain, want, atol=1e-3)  # the adapter does something
        causal = AutoModelForCausalLM.from_pretrained(out).eval()
        torch.testing.assert_close(causal(input_ids=IDS).logits, want, rtol=1e-5, atol=1e-5)
        architecture = json.loads((out / "config.json").read_text())["architectures"][0]
        own = getattr(transformers, architecture).from_pretrained(out).eval()
        assert type(own).__name__ == architecture
        torch.testing.assert_close(own(input_ids=IDS).logits, want, rtol=1e-5, atol=1e-5)


def _copy_adapter(adapter, dest, edit):
    from safetensors.torch import save_file

    dest.mkdir()
    (dest / "adapter_config.json").write_bytes((adapter / "adapter_config.json").read_bytes())
    tensors, metadata = read_tensors(adapter / "adapter_model.safetensors")
    edit(tensors)
    save_file(tensors, str(dest / "adapter_model.safetensors"), metadata=metadata)
    return dest


def test_a_zero_delta_pair_is_refused_naming_its_tensor(merged, tmp_path):
    layout, base, adapter, _, _, _ = merged
    key = sorted(k for k in read_tensors(adapter / "adapter_model.safetensors")[0] if ".lora_B." in k)[2]
    module = key.removeprefix("base_model.model.").removesuffix(".lora_B.weight")
    zeroed = _copy_adapter(adapter, tmp_path / "zeroed", lambda t: t[key].zero_())
    tensor = module.removeprefix("model.") + ".weight"
    with pytest.raises(MergeError, match=rf"{tensor}: the LoRA pair's delta B @ A is zero"):
        merge_snapshot(base, zeroed, tmp_path / "out")


def test_a_pair_for_a_module_the_base_lacks_is_refused(merged, tmp_path):
    _, base, adapter, _, _, _ = merged

    def rename(tensors):
        for half in ("lora_A", "lora_B"):
            key = next(k for k in sorted(tensors) if f".{half}." in k)
            tensors[key.replace("layers.0.", "layers.9.")] = tensors.pop(key)

    stray = _copy_adapter(adapter, tmp_path / "stray", rename)
    with pytest.raises(MergeError, match=r"LoRA pair .*layers\.9\..*: no base tensor named"):
        merge_snapshot(base, stray, tmp_path / "out")


def test_a_pair_of_the_wrong_shape_is_refused(merged, tmp_path):
    _, base, adapter, _, _, _ = merged
    key = sorted(k for k in read_tensors(adapter / "adapter_model.safetensors")[0] if ".lora_B." in k)[0]
    bad = _copy_adapter(adapter, tmp_path / "bad", lambda t: t.__setitem__(key, torch.ones(t[key].shape[0] + 1,
                                                                                           t[key].shape[1])))
    with pytest.raises(MergeError, match=r"the pair's delta is \(\d+, \d+\), the base tensor"):
        merge_snapshot(base, bad, tmp_path / "out")
