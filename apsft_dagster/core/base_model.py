"""Validate and fingerprint a local model directory (the `full` profile's base model)."""

from __future__ import annotations

import json
from pathlib import Path

from apsft_dagster.core.config import Config
from apsft_dagster.core.errors import ModelDirectoryError
from apsft_dagster.core.layout import BASE_MODEL_DIR
from apsft_dagster.core.paths import local_model_dir
from apsft_dagster.core.store import Store, dir_digests, fingerprint


def base_model_path(config: Config, store: Store) -> Path:
    """The policy directory every stage loads: the verified embedded build, or the local snapshot."""
    if config.model.source == "local":
        return local_model_dir(config.model.path)
    store.verify(BASE_MODEL_DIR)
    return store.path(BASE_MODEL_DIR)


def inspect_model_dir(path: str | Path, markers=None) -> dict:
    """Config, tokenizer and safetensors weights must be present; nothing is ever downloaded."""
    root = Path(path)
    config_file = root / "config.json"
    if not config_file.is_file():
        raise ModelDirectoryError(f"{root}: no config.json; point model.path (or APSFT_MODEL_DIR) at a snapshot")
    try:
        model_type = json.loads(config_file.read_text()).get("model_type")
    except json.JSONDecodeError as exc:
        raise ModelDirectoryError(f"{config_file}: not valid JSON ({exc})") from exc
    if not any((root / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise ModelDirectoryError(f"{root}: no tokenizer.json or tokenizer_config.json")
    if not list(root.glob("*.safetensors")):
        raise ModelDirectoryError(f"{root}: no *.safetensors weights")
    from apsft_dagster.core.snapshot import describe_snapshot

    files = dir_digests(root)
    return {"path": str(root), "model_type": model_type, "snapshot": describe_snapshot(root, markers), "files": files,
            "fingerprint": fingerprint(files)}


def load_tokenizer(config: Config, store: Store):
    """The base policy's tokenizer alone (counting tokens needs no weights)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(base_model_path(config, store))
