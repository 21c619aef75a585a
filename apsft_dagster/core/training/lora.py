"""LoRA on every linear projection of the decoder blocks: targets checked, pairs counted, saved exactly.

The targets come from the loaded model's module tree: every linear projection of the decoder blocks
(attention and MLP); a profile's `training.target_modules[model_type]` overrides them, each name
checked to be a linear module of the decoder blocks. The expected number of LoRA pairs is counted
from the model, asserted after the adapter is made and again at merge. Adapters are written by this
module (safetensors with sorted keys and a sorted-key JSON config), so equal weights give equal
bytes wherever the store lives. torch is imported where it is used: reading the constants here
costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from contextlib import contextmanager
from pathlib import Path

from apsft_dagster.core.config import Lora, Training
from apsft_dagster.core.errors import TrainingError

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"


def architecture_key(model_type: str) -> str:
    """The key of `training.target_modules` for a model_type: a text-only `_text` config of a
    multimodal family uses the family's entry."""
    return model_type.removesuffix("_text")


def architecture(model) -> str:
    return architecture_key(model.config.model_type)


def decoder_linears(model) -> dict[str, str]:
    """Qualified name -> leaf name of every nn.Linear inside the decoder's blocks."""
    import torch

    decoder = model.get_decoder()
    prefix = next(n for n, m in model.named_modules() if m is decoder)
    return {f"{prefix}.{name}" if prefix else name: name.rsplit(".", 1)[-1]
            for name, module in decoder.named_modules()
            if isinstance(module, torch.nn.Linear) and name.startswith("layers.")}


def target_modules(model, training: Training) -> tuple[list[str], int]:
    """(the LoRA targets for this model, the expected number of LoRA pairs).

    Derived from the module tree: every linear projection of the decoder blocks, attention and MLP. A mixture
    of experts whose experts are fused 3-D tensors (transformers 5's Qwen3-MoE) has none in its experts: its
    attention is adapted and its experts stay frozen (docs/architectures.md). A `training.target_modules`
    entry for this model_type overrides the derived list; TrainingError naming any name it lists that is not
    a linear projection of the decoder blocks."""
    linears = decoder_linears(model)
    present = set(linears.values())
    arch = architecture(model)
    if arch not in training.target_modules:
        return sorted(present), len(linears)
    wanted = set(training.target_modules[arch])
    if wanted - present:
        raise TrainingError(f"training.target_modules.{arch}: {sorted(wanted - present)} are not linear modules of "
                            f"this model's decoder blocks (they have {sorted(present)}); remove the entry to adapt "
                            "every one")
    return sorted(wanted), sum(1 for leaf in linears.values() if leaf in wanted)


@contextmanager
def quiet_peft():
    """peft asks transformers a deprecated question (is_gradient_checkpointing): not our users' concern."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def lora_config(lora: Lora, targets: list[str]):
    from peft import LoraConfig

    return LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
                      bias="none", task_type="CAUSAL_LM")


def lora_pairs(model) -> list[str]:
    """Names of the modules that carry a LoRA pair (lora_A and lora_B)."""
    return sorted(n for n, m in model.named_modules() if hasattr(m, "lora_A") and hasattr(m, "lora_B")
                  and "default" in m.lora_A)


def adapter_state(model) -> dict:
    from peft import get_peft_model_state_dict

    return {k: v.detach().to("cpu").contiguous() for k, v in sorted(get_peft_model_state_dict(model).items())}


def state_digest(state: dict) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order."""
    import torch

    digest = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().to("cpu").contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def save_adapter(model, out_dir: Path, base_name: str, base_revision: str | None) -> None:
    """adapter_model.safetensors + adapter_config.json, loadable by `PeftModel.from_pretrained`."""
    from safetensors.torch import save_file

    save_file(adapter_state(model), str(out_dir / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    config = model.peft_config["default"].to_dict()
    config.update(base_model_name_or_path=base_name, revision=base_revision)
    (out_dir / ADAPTER_CONFIG).write_text(json.dumps(_plain(config), sort_keys=True, indent=1) + "\n")


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(_plain(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "value") and not isinstance(value, (str, int, float, bool)):  # enums
        return value.value
    return value
