"""What a model snapshot is, read from its own files: architecture, layer types, chat template.

No profile says which architecture it runs: `full` pointed at a Qwen3 snapshot works as it does
at Qwen3.5's. Everything that depends on the architecture is read here (or, for the LoRA targets
and pair count, from the model as `AutoModelForCausalLM` loads it: core/training/lora.py) and
checked against the snapshot before a stage relies on it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from apsft_dagster.core.errors import ModelDirectoryError
from apsft_dagster.core.protocol import THINK_OPEN, format_prompt

LAYER_TYPES = ("full_attention", "linear_attention")
PROBE = "What is 2 + 3?"


def text_config(config: dict) -> dict:
    """The decoder's part of a config.json: `text_config` where a multimodal snapshot nests it, else all of it."""
    return config.get("text_config") or config


def has_linear_attention_layers(config: dict) -> bool:
    """Whether a config.json's decoder has Gated DeltaNet (linear-attention) layers, as Qwen3.5's do."""
    return "linear_attention" in (text_config(config).get("layer_types") or [])


def describe_snapshot(path: str | Path) -> dict:
    """Architecture, model types, layer types and tower of the snapshot's config.json."""
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
            "chat_template": check_chat_template(root)}


def require_lora_targets(description: dict, target_modules: dict[str, list[str]], where: str) -> list[str]:
    """The `training.target_modules` entry for this snapshot's architecture (the text model's type,
    as training keys it), checked when the base model is registered rather than hours later at
    training; ModelDirectoryError naming the entry to add otherwise."""
    from apsft_dagster.core.training.lora import architecture_key

    arch = architecture_key(description["text_model_type"] or "")
    if arch not in target_modules:
        raise ModelDirectoryError(f"{where}: a {description['architectures'] or description['model_type']} snapshot "
                                  f"(model_type {arch!r}), but training.target_modules has entries for "
                                  f"{sorted(target_modules)} only; add {arch}: [its decoder blocks' linear "
                                  "projections]")
    return target_modules[arch]


def check_chat_template(path: str | Path) -> str:
    """The snapshot's chat template must open a user turn as the protocol does (`format_prompt`):
    its generation prompt is x itself (Qwen3.5 opens the thinking turn) or x without the `<think>`
    line (Qwen3 leaves it to the model, and the protocol writes it). Returns which; raises naming
    the file and both texts otherwise."""
    from transformers import AutoTokenizer

    root = Path(path)
    tokenizer = AutoTokenizer.from_pretrained(root)
    if not tokenizer.chat_template:
        raise ModelDirectoryError(f"{root}: no chat template (chat_template.jinja or tokenizer_config.json's "
                                  "chat_template); the protocol's prompt is checked against it")
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": PROBE}], tokenize=False,
                                             add_generation_prompt=True)
    expected = format_prompt(PROBE)
    if rendered == expected:
        return "opens the thinking turn"
    if rendered + f"{THINK_OPEN}\n" == expected:
        return "leaves the thinking turn to the model (the protocol opens it)"
    raise ModelDirectoryError(f"{root}: the chat template renders a user turn as {rendered!r}; the protocol "
                              f"(core/protocol.py format_prompt) writes {expected!r}. This snapshot's chat format "
                              "differs from Qwen's: the experiment's prompts would not be what the model expects")
