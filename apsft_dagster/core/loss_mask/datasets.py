"""Registered dataset versions: a name (the partition key) bound to a file and its SHA-256.

`apsft loss-mask add NAME PATH` registers a file; the group's assets read it only while its
bytes still hash to what was registered, so a report always names the exact input it measured.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

from apsft_dagster.core.layout import lm_file
from apsft_dagster.core.loss_mask.rules import LossMaskError
from apsft_dagster.core.store import Store

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SOURCE = "source.json"
CHUNK = 1 << 20


def check_name(name: str) -> str:
    if not NAME.fullmatch(name) or ".." in name:
        raise LossMaskError(f"dataset name {name!r}: use 1-64 letters, digits, '.', '_' or '-' (no '..'), "
                            "starting with a letter or digit; it names a partition and a store folder")
    return name


def file_sha256(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def register(store: Store, name: str, path: str | Path) -> dict:
    """Record NAME -> the file's absolute path, size and SHA-256 (re-registering replaces it)."""
    check_name(name)
    path = Path(path).resolve()
    if not path.is_file():
        raise LossMaskError(f"dataset {name}: {path} is not a file; give the path of a JSON-lines export")
    sha, size = file_sha256(path)
    record = {"name": name, "path": str(path), "bytes": size, "sha256": sha}
    store.put_json(lm_file(name, SOURCE), record)
    return record


def registered(store: Store, name: str) -> dict:
    check_name(name)
    if not store.exists(lm_file(name, SOURCE)):
        raise LossMaskError(f"dataset {name}: not registered in {store.root}; run `apsft loss-mask add {name} PATH`")
    return store.get_json(lm_file(name, SOURCE))


class HashingLines:
    """The registered file's lines, hashed as they stream; `check()` after the last line proves
    the bytes read are the bytes registered."""

    def __init__(self, record: dict):
        self.record, self.hash, self.size = record, hashlib.sha256(), 0

    def __iter__(self) -> Iterator[bytes]:
        with open(self.record["path"], "rb") as handle:
            for line in handle:
                self.hash.update(line)
                self.size += len(line)
                yield line

    def check(self) -> str:
        actual = self.hash.hexdigest()
        if actual != self.record["sha256"]:
            raise LossMaskError(f"dataset {self.record['name']}: {self.record['path']} hashes to {actual[:12]}... but "
                                f"was registered as {self.record['sha256'][:12]}...; it changed after registration. "
                                f"Re-register it (`apsft loss-mask add {self.record['name']} PATH`) to measure the new bytes")
        return actual
