"""What a model snapshot is, read from its own files: architecture, layer types, chat template.

No profile says which architecture it runs: `full` pointed at a Qwen3, Llama, Gemma 3 or Mistral
snapshot works as it does at Qwen3.5's. Everything that depends on the architecture is read here
(the text protocol from the chat template: core/text_protocol.py; the LoRA targets and pair count
from the model as `AutoModelForCausalLM` loads it: core/training/lora.py) and checked against the
snapshot before a stage relies on it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from apsft_dagster.core.errors import ModelDirectoryError

LAYER_TYPES = ("full_attention", "linear_attention", "sliding_attention")  # sliding: Gemma 3, Mistral


def text_config(config: dict) -> dict:
    """The decoder's part of a config.json: `text_config` where a multimodal snapshot nests it, else all of it."""
    return config.get("text_config") or config


def has_linear_attention_layers(config: dict) -> bool:
    """Whether a config.json's decoder has Gated DeltaNet (linear-attention) layers, as Qwen3.5's do."""
    return "linear_attention" in (text_config(config).get("layer_types") or [])


def describe_snapshot(path: str | Path, markers=None) -> dict:
    """Architecture, model types, layer types and tower of the snapshot's config.json; its chat template
    checked against the protocol with the profile's `markers` (None: the defaults)."""
    root = Path(path)
    config = json.loads((root / "config.json").read_text())
    text = text_config(config)
    layers = text.get("layer_types") or ["full_attention"] * int(text.get("num_hidden_layers", 0))
    unknown = sorted(set(layers) - set(LAYER_TYPES))
    if unknown:
        raise ModelDirectoryError(f"{root / 'config.json'}: layer_types {unknown} are not known to this code "
                                  f"(known: {list(LAYER_TYPES)})")
    return {"architectures": config.get("architectures") or [], "model_type": config.get("model_type"),
            "text_model_type": text.get("model_type", config.get("model_type")),
            "layer_types": dict(sorted(Counter(layers).items())), "vision_tower": "vision_config" in config,
            "tie_word_embeddings": bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
            "chat_template": check_chat_template(root, markers)}


def lora_targets(description: dict, target_modules: dict[str, list[str]]) -> str:
    """What training will adapt in this snapshot, said when the base model is registered: the profile's
    `training.target_modules` entry for its architecture (the text model's type, as training keys it), or
    every linear projection of the decoder blocks, found in the loaded model's module tree
    (core/training/lora.py `target_modules`, which also checks an entry against the model)."""
    from apsft_dagster.core.training.lora import architecture_key

    arch = architecture_key(description["text_model_type"] or "")
    if arch in target_modules:
        return f"training.target_modules.{arch}: {target_modules[arch]}"
    return "every linear projection of the decoder blocks (derived from the module tree)"


def check_chat_template(path: str | Path, markers=None) -> str:
    """The snapshot's chat template must hold the protocol (core/text_protocol.py `derive`: the user's words
    verbatim, a generation prompt that leaves the thought to the model, an end of turn, each marker one token
    of the tokenizer). Returns whether the template opens the thinking turn itself (Qwen3.5) or leaves it to
    the protocol (Qwen3, Llama); ModelDirectoryError naming the snapshot and what its template cannot hold."""
    from transformers import AutoTokenizer

    from apsft_dagster.core.config import Markers
    from apsft_dagster.core.text_protocol import derive

    root = Path(path)
    protocol = derive(AutoTokenizer.from_pretrained(root), markers or Markers(), str(root))
    return ("opens the thinking turn" if protocol.template_opens
            else "leaves the thinking turn to the model (the protocol opens it)")
