"""The embedded model in the layout of a Hugging Face snapshot: Qwen3.5's or Qwen3's.

`qwen3_5` is what `full` targets: a `Qwen3_5ForConditionalGeneration` (text under
`model.language_model.*`, a vision tower under `model.visual.*`, an untied `lm_head`), hybrid
`layer_types` (gated delta-rule blocks with a full-attention block every few layers), and the
file set of such a snapshot: config with `text_config`/`vision_config`, safetensors, tokenizer,
`chat_template.jinja` with the thinking turn, preprocessor configs. Pretraining updates the text
model only, through the `*ForCausalLM` view every stage loads (`AutoModelForCausalLM`); the
vision tower stays as initialized and must come through every stage bit for bit.

`qwen3` is a `Qwen3ForCausalLM` in Qwen3's layout (tied head), the architecture vLLM's CPU
backend runs on these machines.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from apsft_dagster.core.config import Embedded

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")

TEMPLATE_FILE = Path(__file__).resolve().parents[1] / "chat_template.jinja"  # Qwen ChatML with tools
GENERATION_PROMPT = "{{- '<|im_start|>assistant\\n' }}"
THINKING = ("\n    {%- if enable_thinking is defined and enable_thinking is false %}"
            "{{- '<think>\\n\\n</think>\\n\\n' }}"
            "\n    {%- else %}{{- '<think>\\n' }}{%- endif %}")


def chat_template(architecture: str) -> str:
    """Qwen3.5's template opens the thinking turn after the generation prompt; Qwen3's leaves
    `<think>` to the model. Either way the generation prompt plus what the protocol opens
    (`protocol.format_prompt`) agree: core/snapshot.py checks it against every base directory."""
    text = TEMPLATE_FILE.read_text()
    if architecture == "qwen3":
        return text
    if text.count(GENERATION_PROMPT) != 1:
        raise RuntimeError(f"{TEMPLATE_FILE}: expected one generation prompt {GENERATION_PROMPT!r} to extend")
    return text.replace(GENERATION_PROMPT, GENERATION_PROMPT + THINKING)


def layer_types(cfg: Embedded) -> list[str]:
    every = cfg.linear_attention.full_attention_interval
    return ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(cfg.num_layers)]


def build_model(architecture: str, cfg: Embedded, tokenizer, seed: int,
                vocab_rows: int | None = None) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(the model to save, the causal LM to pretrain: the same text weights), seeded. `vocab_rows`:
    embedding rows beyond the tokenizer's ids, as a real snapshot pads them (Qwen3.5: 248,320)."""
    text = dict(vocab_size=vocab_rows or len(tokenizer), hidden_size=cfg.hidden_size,
                intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_layers,
                num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
                max_position_embeddings=cfg.max_positions,
                bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    if architecture == "qwen3":
        from transformers import Qwen3Config, Qwen3ForCausalLM

        model = Qwen3ForCausalLM(Qwen3Config(**text, tie_word_embeddings=True))
        return model, model
    from transformers import Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration

    lin, vis = cfg.linear_attention, cfg.vision
    text.update(layer_types=layer_types(cfg), linear_num_key_heads=lin.num_key_heads,
                linear_num_value_heads=lin.num_value_heads, linear_key_head_dim=lin.key_head_dim,
                linear_value_head_dim=lin.value_head_dim, linear_conv_kernel_dim=lin.conv_kernel,
                tie_word_embeddings=False)
    vision = dict(depth=vis.depth, hidden_size=vis.hidden_size, intermediate_size=vis.intermediate_size,
                  num_heads=vis.num_heads, patch_size=vis.patch_size, temporal_patch_size=vis.temporal_patch_size,
                  spatial_merge_size=vis.spatial_merge_size, num_position_embeddings=vis.num_position_embeddings,
                  out_hidden_size=cfg.hidden_size)
    ids = dict(zip(("vision_start_token_id", "vision_end_token_id", "image_token_id", "video_token_id"),
                   tokenizer.convert_tokens_to_ids(list(VISION_TOKENS))))
    full = Qwen3_5ForConditionalGeneration(Qwen3_5Config(text_config=text, vision_config=vision,
                                                         tie_word_embeddings=False, **ids))
    causal = Qwen3_5ForCausalLM(full.config.text_config)
    causal.model, causal.lm_head = full.model.language_model, full.lm_head  # a view: one set of weights
    return full, causal


def save_snapshot(architecture: str, model, tokenizer, cfg: Embedded, out_dir: Path) -> None:
    """The model, its tokenizer with the chat template, and (Qwen3.5) the preprocessor configs."""
    tokenizer.chat_template = chat_template(architecture)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    if architecture == "qwen3_5":
        for name, doc in preprocessor_configs(cfg).items():
            (out_dir / name).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def preprocessor_configs(cfg: Embedded) -> dict[str, dict]:
    """What a Qwen3.5 snapshot ships for images and video, sized to the tiny tower."""
    vis = cfg.vision
    common = {"patch_size": vis.patch_size, "temporal_patch_size": vis.temporal_patch_size,
              "merge_size": vis.spatial_merge_size, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
              "do_rescale": True, "do_normalize": True, "do_resize": True, "do_convert_rgb": True,
              "rescale_factor": 1 / 255, "processor_class": "Qwen3VLProcessor"}
    return {"preprocessor_config.json": {**common, "image_processor_type": "Qwen2VLImageProcessorFast",
                                         "size": {"shortest_edge": 4096, "longest_edge": 65536}},
            "video_preprocessor_config.json": {**common, "video_processor_type": "Qwen3VLVideoProcessor",
                                               "size": {"shortest_edge": 4096, "longest_edge": 65536},
                                               "fps": 2, "min_frames": 4, "max_frames": 64}}
