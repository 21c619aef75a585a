"""Merge a policy's LoRA pairs into the base snapshot's own files (docs/PROTOCOL.md §12).

The merge works on the snapshot, not on a loaded model: the adapter is what peft saves for the
model as `AutoModelForCausalLM` loads the base (for a Qwen3.5 snapshot that is the text-only
`Qwen3_5ForCausalLM`, whose names drop the snapshot's `language_model.` level), so each pair's
module is mapped back to the tensor the base files hold, `W' = W + (alpha / r) * B @ A` is
computed in `dtype` and stored in the base tensor's own dtype, and every file is rewritten with
the base's names, shapes and metadata. A weights file no pair touches (a vision tower's shard) and
every file that is not weights (config, tokenizer, chat template, preprocessor and generation
config) is copied byte for byte, so the merged snapshot loads exactly as the base does, under
the base's architecture. The result is then read back from disk and proven: exactly one changed
tensor per pair, every other tensor bit-identical to the base's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from apsft_dagster.core.errors import MergeError

WEIGHTS = "*.safetensors"
PEFT_PREFIX = "base_model.model."
TEXT_LEVEL = ("model.", "model.language_model.")  # causal-LM view -> multimodal snapshot


def read_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str] | None]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        return {name: fh.get_tensor(name) for name in fh.keys()}, fh.metadata()


def tensor_files(snapshot: Path) -> dict[str, str]:
    """Tensor name -> the weights file (name) holding it."""
    from safetensors import safe_open

    where = {}
    for file in sorted(snapshot.glob(WEIGHTS)):
        with safe_open(str(file), framework="pt") as fh:
            where.update((name, file.name) for name in fh.keys())
    return where


def adapter_pairs(adapter_dir: Path) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], float]:
    """(module name as the causal LM names it -> (A, B), scaling) from peft's two files."""
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    for key, plain in (("use_dora", False), ("fan_in_fan_out", False), ("rank_pattern", {}), ("alpha_pattern", {})):
        if config.get(key, plain) not in (plain, None):
            raise MergeError(f"{adapter_dir}/adapter_config.json: {key}={config[key]!r} is not merged by this code "
                             "(plain LoRA pairs only)")
    if config.get("modules_to_save"):
        raise MergeError(f"{adapter_dir}/adapter_config.json: modules_to_save {config['modules_to_save']} would "
                         "replace whole tensors; only LoRA pairs are merged")
    rank, alpha = config["r"], config["lora_alpha"]
    scaling = alpha / rank ** 0.5 if config.get("use_rslora") else alpha / rank
    tensors, _ = read_tensors(adapter_dir / "adapter_model.safetensors")
    halves: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors.items():
        stem = name.removeprefix(PEFT_PREFIX)
        for half in ("lora_A", "lora_B"):
            if stem.endswith(f".{half}.weight"):
                halves.setdefault(stem.removesuffix(f".{half}.weight"), {})[half] = tensor
                break
        else:
            raise MergeError(f"{adapter_dir}: tensor {name} is not half of a LoRA pair; nothing was merged")
    pairs = {}
    for module, half in sorted(halves.items()):
        if set(half) != {"lora_A", "lora_B"}:
            raise MergeError(f"{adapter_dir}: {module} has only {sorted(half)}; a pair needs lora_A and lora_B")
        pairs[module] = (half["lora_A"], half["lora_B"])
    return pairs, scaling


def snapshot_name(module: str, names: dict[str, str]) -> str:
    """The base tensor a pair's module adapts: `<module>.weight` in the snapshot's own naming."""
    direct = f"{module}.weight"
    nested = TEXT_LEVEL[1] + direct.removeprefix(TEXT_LEVEL[0]) if direct.startswith(TEXT_LEVEL[0]) else None
    found = [n for n in (direct, nested) if n is not None and n in names]
    if len(found) != 1:
        raise MergeError(f"LoRA pair {module}: {'no' if not found else 'two'} base tensor{'s' if found else ''} "
                         f"named {direct}{f' or {nested}' if nested else ''}; the adapter was not trained on this base")
    return found[0]


def merged_weight(target: str, weight: torch.Tensor, pair: tuple[torch.Tensor, torch.Tensor], scaling: float,
                  dtype: torch.dtype, device: str) -> torch.Tensor:
    a, b = (t.to(device=device, dtype=dtype) for t in pair)
    delta = (b @ a) * scaling
    if delta.shape != weight.shape:
        raise MergeError(f"{target}: the pair's delta is {tuple(delta.shape)}, the base tensor {tuple(weight.shape)}")
    if not torch.any(delta != 0):
        raise MergeError(f"{target}: the LoRA pair's delta B @ A is zero (lora_B all zeros: an untrained adapter?); "
                         "merging it would change nothing")
    merged = (weight.to(device=device, dtype=dtype) + delta).to(dtype=weight.dtype, device="cpu").contiguous()
    if torch.equal(merged, weight):
        raise MergeError(f"{target}: merged in {dtype} and stored as {weight.dtype}, it is bit-identical to the base "
                         "(the delta is below that dtype's resolution)")
    return merged


def merge_snapshot(base_dir, adapter_dir, out_dir, *, dtype: str = "float32", device: str = "cpu") -> dict:
    """Write `out_dir`: the base snapshot with every LoRA pair of `adapter_dir` merged in; return
    `lora_pairs`, `changed_tensors`, `unchanged_tensors` as proven from the written files.
    MergeError naming the tensor on a zero-delta pair or any mismatch."""
    from safetensors.torch import save_file

    base, adapter, out = Path(base_dir), Path(adapter_dir), Path(out_dir)
    names = tensor_files(base)
    if not names:
        raise MergeError(f"{base}: no *.safetensors weights to merge into")
    pairs, scaling = adapter_pairs(adapter)
    targets = {snapshot_name(module, names): pair for module, pair in pairs.items()}
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(p for p in base.rglob("*") if p.is_file() and not p.match(WEIGHTS)):
        (out / path.relative_to(base)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out / path.relative_to(base))
    for file in sorted(set(names.values())):
        touched = [t for t in targets if names[t] == file]
        if not touched:
            shutil.copyfile(base / file, out / file)
            continue
        tensors, metadata = read_tensors(base / file)
        for target in touched:
            tensors[target] = merged_weight(target, tensors[target], targets[target], scaling,
                                            getattr(torch, dtype), device)
        save_file(tensors, str(out / file), metadata=metadata)
    return verify_snapshot(base, names, out, set(targets))


def verify_snapshot(base: Path, want: dict[str, str], merged: Path, targets: set[str]) -> dict:
    """Read the merged files back (and the base's again, one file at a time, against `want`, its
    tensor -> file map): the same names and shapes, exactly `targets` changed."""
    have = tensor_files(merged)
    problems = [f"{n}: in the base, absent from the merged snapshot" for n in sorted(set(want) - set(have))]
    problems += [f"{n}: in the merged snapshot, not in the base" for n in sorted(set(have) - set(want))]
    changed = set()
    for file in sorted(set(want.values())):
        mine, _ = read_tensors(merged / file) if (merged / file).is_file() else ({}, None)
        for name, tensor in read_tensors(base / file)[0].items():
            other = mine.get(name)
            if other is None:
                continue
            if other.shape != tensor.shape or other.dtype != tensor.dtype:
                problems.append(f"{name}: {other.dtype} {tuple(other.shape)} merged, {tensor.dtype} "
                                f"{tuple(tensor.shape)} in the base")
            elif not torch.equal(other, tensor):
                changed.add(name)
    problems += [f"{n}: adapted, but bit-identical to the base after the merge (pair not merged)"
                 for n in sorted(targets - changed)]
    problems += [f"{n}: changed by the merge but carries no LoRA pair" for n in sorted(changed - targets)]
    if problems:
        raise MergeError(f"merge check failed ({len(problems)} problems):\n  " + "\n  ".join(problems[:20]))
    return {"lora_pairs": len(targets), "changed_tensors": len(changed), "unchanged_tensors": len(want) - len(changed)}
