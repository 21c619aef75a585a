"""Merging: logits equal the adapter-wrapped model's, exactly the adapted weights change, a skipped pair is caught."""

import pytest
import torch

from apsft_dagster.core.config import Compute, load_config
from apsft_dagster.core.errors import MergeError
from apsft_dagster.core.training.lora import lora_config, lora_pairs, save_adapter, target_modules
from apsft_dagster.core.training.merge import merge_adapter, verify_merge
from tiny import tiny_model

CPU = Compute(device="cpu", dtype="float32", quantization="none", threads=2)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny base and a non-trivial adapter (random B as well as A: a fresh adapter's delta is zero)."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("merge")
    base = tiny_model(root / "base", 0, layers=2)
    model = AutoModelForCausalLM.from_pretrained(base)
    targets, expected = target_modules(model, load_config("smoke").training)
    config = lora_config(load_config("smoke").training.lora, targets)
    config.init_lora_weights = False
    torch.manual_seed(3)
    wrapped = get_peft_model(model, config)
    adapter = root / "adapter"
    adapter.mkdir()
    save_adapter(wrapped, adapter, "tiny", None)
    return base, str(adapter), expected


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_merged_logits_equal_the_adapter_wrapped_models(trained):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base, adapter, _ = trained
    ids = torch.tensor([[5, 17, 42, 8, 99, 3, 250, 7]])
    wrapped = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).eval()
    merged, _ = merge_adapter(base, adapter, CPU)
    plain = AutoModelForCausalLM.from_pretrained(base).eval()
    assert not torch.allclose(_logits(plain, ids), _logits(wrapped, ids), atol=1e-3)  # the adapter does something
    torch.testing.assert_close(_logits(merged.eval(), ids), _logits(wrapped, ids), rtol=1e-5, atol=1e-5)


def test_exactly_the_adapted_weights_change(trained):
    base, adapter, expected = trained
    merged, pairs = merge_adapter(base, adapter, CPU)
    counts = verify_merge(merged, pairs, expected, base)
    assert counts["lora_pairs"] == counts["changed_tensors"] == expected == 14
    assert counts["unchanged_tensors"] > 0  # norms and embeddings: compared bit for bit with the base files


def test_a_skipped_pair_is_caught_by_the_count(trained):
    """One pair left unmerged (as a library bug or a zeroed B would leave it): named, and the merge fails."""
    base, adapter, expected = trained
    merged, pairs = merge_adapter(base, adapter, CPU)
    skipped = pairs[3]
    from apsft_dagster.core.training.merge import base_tensors

    with torch.no_grad():  # put the base weight back as if that pair had not been merged
        original = dict(base_tensors(base))[f"{skipped}.weight"]
        merged.get_submodule(skipped).weight.copy_(original)
    with pytest.raises(MergeError, match=f"{skipped}.weight: adapted, but bit-identical"):
        verify_merge(merged, pairs, expected, base)


def test_a_changed_weight_without_a_pair_is_caught(trained):
    base, adapter, expected = trained
    merged, pairs = merge_adapter(base, adapter, CPU)
    with torch.no_grad():
        merged.model.norm.weight.add_(1e-3)
    with pytest.raises(MergeError, match="model.norm.weight: changed by the merge but carries no LoRA pair"):
        verify_merge(merged, pairs, expected, base)


def test_pairs_recorded_by_training_must_match_the_adapter(trained):
    base, adapter, expected = trained
    merged, pairs = merge_adapter(base, adapter, CPU)
    with pytest.raises(MergeError, match=f"holds {expected} LoRA pairs, training recorded {expected + 1}"):
        verify_merge(merged, pairs, expected + 1, base)
    assert len(lora_pairs(merged)) == 0  # merge_and_unload leaves no LoRA module behind
