"""Banks of per-task shards: naming, the index, export, and import of an inherited bank.

An exported bank is a folder with `index.json` and `shards/<task_id>.parquet` (+ receipts).
The index maps task -> shard path and SHA-256; its own SHA-256 is what a config records in
`harvest.inherited_index_sha256`. Import verifies that digest and every shard before anything is
copied; shards are copied byte for byte (never re-serialized), so their hashes stay the same.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from apsft_dagster.core.errors import HashMismatchError, MissingArtifactError
from apsft_dagster.core.layout import index_file, shard_file
from apsft_dagster.core.store import RECEIPT_SUFFIX, Store, inside, json_bytes, sha256_bytes, sha256_file, write_atomic

INDEX_FORMAT = "apsft-bank-index/1"


def write_index(store: Store, bank: str, digests: dict[str, str]) -> str:
    """Write the bank's index from shard digests the caller verified; return the index SHA-256."""
    return store.put_json(index_file(bank), bank_index(bank, digests))


def bank_index(bank: str, digests: dict[str, str]) -> dict:
    """The index document: task -> {shard, sha256}, from digests the caller has verified."""
    return {"format": INDEX_FORMAT, "bank": bank,
            "tasks": {t: {"shard": f"shards/{t}.parquet", "sha256": digests[t]} for t in sorted(digests)}}


def export_bank(store: Store, bank: str, task_ids: list[str], out_dir: str | Path) -> str:
    """Write `out_dir/index.json` and a verbatim copy of every shard; return the index SHA-256."""
    out = Path(out_dir)
    index = bank_index(bank, {t: store.verify(shard_file(bank, t)) for t in task_ids})
    for task_id, entry in index["tasks"].items():
        source = store.path(shard_file(bank, task_id))
        (out / "shards").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, out / entry["shard"])
        shutil.copyfile(store.receipt_path(shard_file(bank, task_id)), out / (entry["shard"] + RECEIPT_SUFFIX))
    data = json_bytes(index)
    write_atomic(out / "index.json", data)
    return sha256_bytes(data)


class InheritedBank:
    """A verified inherited bank; construction fails (naming the index or shard) before any import."""

    def __init__(self, index_path: str | Path, expected_sha256: str):
        self.index_path = Path(index_path)
        if not self.index_path.is_file():
            raise MissingArtifactError(f"{self.index_path}: inherited bank index not found (harvest.inherited_index)")
        data = self.index_path.read_bytes()
        actual = sha256_bytes(data)
        if actual != expected_sha256:
            raise HashMismatchError(
                f"{self.index_path}: index SHA-256 is {actual} but harvest.inherited_index_sha256 records "
                f"{expected_sha256}; nothing was imported. Use the index that was recorded, or record this one "
                "as a dated amendment")
        self.tasks = json.loads(data)["tasks"]
        for task_id, entry in self.tasks.items():  # every shard inside the bank's own folder, before any is read
            inside(self.index_path.parent, entry.get("shard", ""), f"{self.index_path}: task {task_id}'s shard")
        for task_id in self.tasks:
            self._check(task_id, sha256_file(self._path(task_id)))

    def _path(self, task_id: str) -> Path:
        path = self.index_path.parent / self.tasks[task_id]["shard"]
        if not path.is_file():
            raise MissingArtifactError(f"{path}: shard of inherited task {task_id} is missing; nothing was imported")
        return path

    def _check(self, task_id: str, actual: str) -> None:
        expected = self.tasks[task_id]["sha256"]
        if actual != expected:
            raise HashMismatchError(
                f"{self._path(task_id)}: shard of inherited task {task_id} has SHA-256 {actual} but the index "
                f"receipt says {expected}; nothing was imported")

    def __contains__(self, task_id: str) -> bool:
        return task_id in self.tasks

    def import_into(self, store: Store, bank: str, task_id: str) -> str:
        """Copy the shard byte for byte (re-checked as read) into the store, with its receipt."""
        data = self._path(task_id).read_bytes()
        self._check(task_id, sha256_bytes(data))
        return store.put_bytes(shard_file(bank, task_id), data)
