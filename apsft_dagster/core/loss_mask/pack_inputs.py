"""What a pack tokenizes with: the registered dataset's own tokenizer folder and chat template when its
record names them (`apsft loss-mask add ... --tokenizer DIR --chat-template FILE`), else the experiment's
base model; and `tokenizer_sha256`, one digest of a tokenizer folder's tokenizer files, for the receipt."""

from __future__ import annotations

from pathlib import Path

from apsft_dagster.core.loss_mask.rules import LossMaskError
from apsft_dagster.core.store import fingerprint, sha256_bytes, sha256_file

# the files a tokenizer is loaded from (those present are digested; weights and configs are not)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model", "chat_template.jinja")


def tokenizer_sha256(folder: str | Path) -> str:
    """SHA-256 over the (file name -> SHA-256) map of the tokenizer files present in `folder`."""
    folder = Path(folder)
    files = {name: sha256_file(folder / name) for name in TOKENIZER_FILES if (folder / name).is_file()}
    if "tokenizer.json" not in files and "tokenizer_config.json" not in files:
        raise LossMaskError(f"{folder}: no tokenizer.json or tokenizer_config.json; give the folder a tokenizer "
                            "was saved to (save_pretrained)")
    return fingerprint(files)


def tokenizer_folder(record: dict, base_model_folder) -> Path:
    """The record's `tokenizer` folder when set, else the base model's (`base_model_folder()`, only then called)."""
    return Path(record["tokenizer"]) if record.get("tokenizer") else Path(base_model_folder())


def load_pack_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    if not folder.is_dir():
        raise LossMaskError(f"tokenizer {folder}: not a folder; re-register the dataset with --tokenizer DIR")
    digest = tokenizer_sha256(folder)
    return AutoTokenizer.from_pretrained(str(folder)), digest


def registered_template(record: dict) -> str | None:
    """The record's chat template text, its SHA-256 checked against the registered one; None when unset."""
    given = record.get("chat_template")
    if not given:
        return None
    path = Path(given["path"])
    data = path.read_bytes() if path.is_file() else None
    if data is None or sha256_bytes(data) != given["sha256"]:
        raise LossMaskError(f"dataset {record.get('name')}: chat template {path} is missing or changed since "
                            "registration; re-register the dataset with --chat-template FILE")
    return data.decode()
