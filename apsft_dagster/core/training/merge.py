"""Merge a policy's LoRA pairs into the base and prove what changed (docs/PROTOCOL.md §12).

The merge loads the base in the compute dtype, never 4-bit: an adapter trained on an NF4 base
is merged into the bf16 (or float32) base, and the receipt says which. The check does not trust
the library's flags: every tensor of the merged model is compared with the base's own
safetensors files, and exactly the expected number of weights (one per LoRA pair, the targeted
projections' `.weight`) must differ while every other tensor is bit-identical. Every deployed
file is fingerprinted by the store.
"""

from __future__ import annotations

from pathlib import Path

import torch

from apsft_dagster.core.config import Compute
from apsft_dagster.core.errors import MergeError


def base_tensors(base_path: str | Path):
    """(name, tensor) of every tensor in the base's safetensors files, read one at a time."""
    from safetensors import safe_open

    for file in sorted(Path(base_path).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as fh:
            for name in fh.keys():
                yield name, fh.get_tensor(name)


def changed_weights(merged_state: dict[str, torch.Tensor],
                    base_path: str | Path) -> tuple[list[str], list[str], int]:
    """(names whose bits differ from the base files, base names absent from the merged model,
    how many base tensors were compared): one pass over the base files."""
    changed, missing, seen = [], [], 0
    for name, base in base_tensors(base_path):
        seen += 1
        mine = merged_state.get(name)
        if mine is None:
            missing.append(name)
        elif mine.shape != base.shape or not torch.equal(mine.cpu(), base.to(mine.dtype)):  # as loaded
            changed.append(name)
    return sorted(changed), missing, seen


def merge_problems(changed: list[str], missing: list[str], expected_modules: list[str]) -> list[str]:
    """Exactly the adapted modules' weights changed, nothing else; each problem named."""
    want = {f"{m}.weight" for m in expected_modules}
    problems = [f"{n}: adapted, but bit-identical to the base after the merge (pair not merged)"
                for n in sorted(want - set(changed))]
    problems += [f"{n}: changed by the merge but carries no LoRA pair" for n in sorted(set(changed) - want)]
    problems += [f"{n}: in the base files, absent from the merged model" for n in missing]
    return problems


def merge_adapter(base_path: str, adapter_path: str, compute: Compute):
    """(merged model, names of the modules whose pairs were merged, as the base model names them)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from apsft_dagster.core.engines.transformers_engine import torch_dtype
    from apsft_dagster.core.training.lora import lora_pairs, quiet_peft

    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch_dtype(compute.dtype)).to(compute.device)
    with quiet_peft():
        wrapped = PeftModel.from_pretrained(base, adapter_path)
    pairs = [n.removeprefix("base_model.model.") for n in lora_pairs(wrapped)]
    return wrapped.merge_and_unload(), pairs


def verify_merge(merged, pairs: list[str], expected_pairs: int, base_path: str) -> dict:
    """The counts the receipt records; MergeError naming every problem."""
    state = {k: v.detach() for k, v in merged.state_dict().items()}
    changed, missing, compared = changed_weights(state, base_path)
    problems = merge_problems(changed, missing, pairs)
    if len(pairs) != expected_pairs:
        problems.insert(0, f"the adapter holds {len(pairs)} LoRA pairs, training recorded {expected_pairs}")
    if problems:
        raise MergeError(f"merge check failed ({len(problems)} problems):\n  " + "\n  ".join(problems[:20]))
    return {"lora_pairs": len(pairs), "changed_tensors": len(changed), "unchanged_tensors": compared - len(changed)}


def save_merged(merged, tokenizer_path: str, out_dir: Path) -> None:
    """The deployable model: safetensors weights, config, generation config and the base's tokenizer."""
    from transformers import AutoTokenizer

    merged.save_pretrained(out_dir, safe_serialization=True)
    AutoTokenizer.from_pretrained(tokenizer_path).save_pretrained(out_dir)
