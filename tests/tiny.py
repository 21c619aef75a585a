"""Tiny real models for tests: a random Qwen3 with a tokenizer trained here, and a training store."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

CORPUS = ["<|im_start|>user\nAdd 1 and 2.<|im_end|>\n<|im_start|>assistant\n<think>\n1 + 2 = 3\n</think>\n\n"
          "ANSWER: 3<|im_end|>"] * 4


def tiny_tokenizer(path):
    """The tiny models' tokenizer, saved to `path` and loaded back as a model directory's would be."""
    from transformers import AutoTokenizer

    from apsft_dagster.core.embedded.tokenizer import train_tokenizer

    train_tokenizer(CORPUS, 300).save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def tiny_model(path, seed: int, layers: int = 1) -> str:
    """A real (random) Qwen3 saved with its tokenizer: enough to load, train, merge and generate."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from apsft_dagster.core.embedded.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(CORPUS, 300)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                                         head_dim=8, pad_token_id=tokenizer.pad_token_id))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


_BUILT: dict[tuple[str, int, int], Path] = {}  # (layout, seed, layers) -> this process's first build


def tiny_snapshot(path, layout: str = "qwen3_5", seed: int = 0, layers: int = 4) -> Path:
    """A random tiny snapshot through the embedded build's own layout code: `qwen3_5` is a
    Qwen3_5ForConditionalGeneration (hybrid layers, vision tower, untied head, chat template,
    preprocessor configs) carrying Qwen3.5's real tokenizer (core/qwen35/tokenizer.py) with the
    embedding padded to the real 248,320 rows, so `</think>`, the boundary, stop tokens and record
    limits run on real ids; `qwen3` a Qwen3ForCausalLM with a tokenizer trained here.
    A process builds each (layout, seed, layers) once (1.6 s over the real vocabulary) and copies it to
    every later `path`: the build is deterministic (tests/test_model_cache.py), and a test may edit its copy."""
    key = (layout, seed, layers)
    if key not in _BUILT:
        built = Path(tempfile.mkdtemp(prefix="apsft-tiny-")) / "model"
        atexit.register(shutil.rmtree, built.parent, True)
        _BUILT[key] = _build_snapshot(built, layout, seed, layers)
    shutil.copytree(_BUILT[key], path, dirs_exist_ok=True)
    return Path(path)


def _build_snapshot(path, layout: str, seed: int, layers: int) -> Path:
    from apsft_dagster.core.config import load_config
    from apsft_dagster.core.embedded.layout import build_model, save_snapshot
    from apsft_dagster.core.embedded.tokenizer import train_tokenizer
    from apsft_dagster.core.qwen35.tokenizer import embedding_rows, load_qwen35_tokenizer

    cfg = load_config("smoke").embedded
    cfg = cfg.model_copy(update={
        "hidden_size": 16, "intermediate_size": 32, "num_layers": layers, "num_heads": 2, "num_kv_heads": 1,
        "head_dim": 8, "linear_attention": cfg.linear_attention.model_copy(update={
            "full_attention_interval": 2, "num_key_heads": 1, "num_value_heads": 2, "key_head_dim": 8,
            "value_head_dim": 8}),
        "vision": cfg.vision.model_copy(update={"hidden_size": 8, "intermediate_size": 16, "num_heads": 1})})
    real = layout == "qwen3_5"
    tokenizer = load_qwen35_tokenizer() if real else train_tokenizer(CORPUS, 300)
    snapshot, _ = build_model(layout, cfg, tokenizer, seed, vocab_rows=embedding_rows() if real else None)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_snapshot(layout, snapshot, tokenizer, cfg, path)
    return path


def training_rows(n: int) -> list[dict]:
    return [{"prompt": f"Add {i} and {i + 2}.", "thought": f"{i} + {i + 2} = {2 * i + 2}\n", "answer": str(2 * i + 2),
             "task_id": f"t{i}"} for i in range(n)]


def training_store(root, base: str, arm: str, rows: list[dict]):
    """A store holding what `train_policy` reads: the arm file and the base model report."""
    from apsft_dagster.core.layout import BASE_MODEL_REPORT, arm_file
    from apsft_dagster.core.store import Store, dir_digests, fingerprint

    store = Store(root)
    store.put_jsonl_gz(arm_file(arm), rows)
    store.put_json(BASE_MODEL_REPORT, {"fingerprint": fingerprint(dir_digests(Path(base)))})
    return store


def small_training(config, **changes):
    """The smoke config with training settings changed (e.g. checkpoint_every)."""
    return config.model_copy(update={"training": config.training.model_copy(update=changes)})
