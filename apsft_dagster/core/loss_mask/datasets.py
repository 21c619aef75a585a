"""Registered dataset versions: a name (the partition key) bound to a file and its SHA-256.

`apsft loss-mask add NAME PATH` registers a file; the group's assets read it only while its
bytes still hash to what was registered, so a report always names the exact input it measured.
The record also holds the file's chat `format` (formats/; auto-detected unless given), and
optionally a `tokenizer` folder and `chat_template` for the pack and an external `flags` file the
build masks from (each path checked, the files hashed, before anything is written). A Hugging
Face dataset folder or Parquet file is staged as JSON lines in the store (`staged.jsonl`) and
`path` names that, with the original in `staged_from`. An old record without these keys means
format "native", no tokenizer, template or flags.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

from apsft_dagster.core import names
from apsft_dagster.core.loss_mask.flags_file import ExternalFlags
from apsft_dagster.core.loss_mask.formats import check_first_rows, check_format, detect_format
from apsft_dagster.core.loss_mask.formats.staging import stage
from apsft_dagster.core.loss_mask.names import lm_file
from apsft_dagster.core.loss_mask.rules import LossMaskError
from apsft_dagster.core.loss_mask.streams import LINE_BUFFER
from apsft_dagster.core.store import Store, dir_digests, fingerprint, sha256_file

SOURCE = "source.json"


def check_name(name: str) -> str:
    return names.check_name(name, "dataset", LossMaskError)


def register(store: Store, name: str, path: str | Path, *, fmt: str | None = None, flags: str | Path | None = None,
             tokenizer: str | Path | None = None, chat_template: str | Path | None = None) -> dict:
    """Record NAME -> the file's absolute path, size, SHA-256 and format, and the optional tokenizer,
    chat template and flags file (re-registering replaces it); see the module doc."""
    check_name(name)
    path = Path(path).resolve()
    columnar = path.is_dir() or path.suffix == ".parquet"
    if not path.is_file() and not path.is_dir():
        raise LossMaskError(f"dataset {name}: {path} is not a file; give the path of a JSON-lines export, a Parquet "
                            "file or a datasets save_to_disk folder")
    extras = _extras(name, flags, tokenizer, chat_template)
    fmt = check_format(fmt) if fmt is not None else (None if columnar else detect_format(path))
    staged_from = None
    if columnar:
        staged = store.path(lm_file(name, "staged.jsonl"))
        digest = fingerprint(dir_digests(path)) if path.is_dir() else sha256_file(path)
        staged_from = {"path": str(path), "sha256": digest}
        staged_from["rows"] = stage(path, staged)
        path, fmt = staged, fmt or detect_format(staged)
    check_first_rows(path, fmt)
    record = {"name": name, "path": str(path), "bytes": path.stat().st_size, "sha256": sha256_file(path),
              "format": fmt, **extras, **({"staged_from": staged_from} if staged_from else {})}
    store.put_json(lm_file(name, SOURCE), record)
    return record


def _extras(name: str, flags, tokenizer, chat_template) -> dict:
    """The optional tokenizer, chat template and flags file, each checked before anything is written."""
    out: dict = {"tokenizer": None, "chat_template": None, "flags": None}
    if tokenizer is not None:
        folder = Path(tokenizer).resolve()
        if not folder.is_dir():
            raise LossMaskError(f"dataset {name}: --tokenizer {folder} is not a folder; give a tokenizer's folder "
                                "(tokenizer.json or the files AutoTokenizer reads)")
        out["tokenizer"] = str(folder)
    if chat_template is not None:
        file = Path(chat_template).resolve()
        try:
            file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise LossMaskError(f"dataset {name}: --chat-template {file} does not read as UTF-8 text ({exc}); give "
                                "a Jinja template file") from None
        out["chat_template"] = {"path": str(file), "sha256": sha256_file(file)}
    if flags is not None:
        file = Path(flags).resolve()
        if not file.is_file():
            raise LossMaskError(f"dataset {name}: --flags {file} is not a file; give a JSON-lines flags file")
        ExternalFlags(file)  # its shape, line by line, before the record names it
        out["flags"] = {"path": str(file), "sha256": sha256_file(file)}
    return out


def dataset_format(record: dict) -> str:
    """The registered rows' format (an old record: native)."""
    return record.get("format") or "native"


def registered(store: Store, name: str) -> dict:
    check_name(name)
    if not store.exists(lm_file(name, SOURCE)):
        raise LossMaskError(f"dataset {name}: not registered in {store.root}; run `apsft loss-mask add {name} PATH`")
    return store.get_json(lm_file(name, SOURCE))


def check_unchanged(record: dict, sha256: str | None = None) -> str:
    """The registered file's SHA-256 (computed unless given) must still be the registered one."""
    actual = sha256 or sha256_file(Path(record["path"]))
    if actual != record["sha256"]:
        raise LossMaskError(f"dataset {record['name']}: {record['path']} hashes to {actual[:12]}... but "
                            f"was registered as {record['sha256'][:12]}...; it changed after registration. "
                            f"Re-register it (`apsft loss-mask add {record['name']} PATH`) to measure the new bytes")
    return actual


class HashingLines:
    """The registered file's lines, hashed as they stream; `check()` after the last line proves
    the bytes read are the bytes registered."""

    def __init__(self, record: dict):
        self.record, self.hash = record, hashlib.sha256()

    def __iter__(self) -> Iterator[bytes]:
        with open(self.record["path"], "rb", buffering=LINE_BUFFER) as handle:
            for line in handle:
                self.hash.update(line)
                yield line

    def check(self) -> str:
        return check_unchanged(self.record, self.hash.hexdigest())
