"""Registered dataset versions: a name (the partition key) bound to a file and its SHA-256.

`apsft loss-mask add NAME PATH` registers a file; the group's assets read it only while its
bytes still hash to what was registered, so a report always names the exact input it measured.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

from apsft_dagster.core import names
from apsft_dagster.core.loss_mask.names import lm_file
from apsft_dagster.core.loss_mask.rules import LossMaskError
from apsft_dagster.core.loss_mask.streams import LINE_BUFFER
from apsft_dagster.core.store import Store, sha256_file

SOURCE = "source.json"


def check_name(name: str) -> str:
    return names.check_name(name, "dataset", LossMaskError)


def register(store: Store, name: str, path: str | Path) -> dict:
    """Record NAME -> the file's absolute path, size and SHA-256 (re-registering replaces it)."""
    check_name(name)
    path = Path(path).resolve()
    if not path.is_file():
        raise LossMaskError(f"dataset {name}: {path} is not a file; give the path of a JSON-lines export")
    record = {"name": name, "path": str(path), "bytes": path.stat().st_size, "sha256": sha256_file(path)}
    store.put_json(lm_file(name, SOURCE), record)
    return record


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
