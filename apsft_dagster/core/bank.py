"""Banks of per-task shards: reading them (the one reader: `stored_tasks`, `read_shards`), the index,
export, and import of an inherited bank. Their file names are core/layout.py's.

An exported bank is a folder with `index.json` and `shards/<task_id>.parquet` (+ receipts).
The index maps task -> shard path and SHA-256; its own SHA-256 is what a config records in
`harvest.inherited_index_sha256`. Import verifies that digest and every shard before anything is
copied; shards are copied byte for byte (never re-serialized), so their hashes stay the same.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from apsft_dagster.core.errors import BankFormatError, HashMismatchError, MissingArtifactError
from apsft_dagster.core.json_input import error_field, parse_json
from apsft_dagster.core.layout import index_file, key_file, shard_file
from apsft_dagster.core.store import RECEIPT_SUFFIX, Store, inside, json_bytes, sha256_bytes, write_atomic

INDEX_FORMAT = "apsft-bank-index/1"
TASK_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"  # a partition key and a file name


def write_index(store: Store, bank: str, digests: dict[str, str]) -> str:
    """Write the bank's index from shard digests the caller verified, with each shard's key (verified
    here: a hand-edited key stops the index, naming it); return the index SHA-256."""
    return store.put_json(index_file(bank), bank_index(bank, digests, key_digests(store, bank, digests)))


def key_digests(store: Store, bank: str, task_ids) -> dict[str, str]:
    """Each task's key SHA-256 (receipt verified), for the tasks whose shard has a key."""
    return {t: store.verify(key_file(bank, t)) for t in sorted(task_ids) if store.exists(key_file(bank, t))}


def bank_index(bank: str, digests: dict[str, str], keys: dict[str, str] | None = None) -> dict:
    """The index document: task -> {shard, sha256} and, where the shard has one, {key, key_sha256}."""
    keys = keys or {}
    return {"format": INDEX_FORMAT, "bank": bank,
            "tasks": {t: {"shard": f"shards/{t}.parquet", "sha256": digests[t],
                          **({"key": f"keys/{t}.json", "key_sha256": keys[t]} if t in keys else {})}
                      for t in sorted(digests)}}


def stored_tasks(store: Store, bank: str, task_ids: Iterable[str]) -> list[str]:
    """The tasks, in the given order, whose shard of `bank` is in the store (with its receipt)."""
    return [t for t in task_ids if store.exists(shard_file(bank, t))]


def read_shards(store: Store, bank: str, task_ids: Iterable[str], columns: list[str] | None = None,
                schema: dict | None = None) -> pl.DataFrame:
    """The tasks' shards of `bank`, each verified against its receipt as it is read, concatenated in
    the tasks' order: `columns` (default: the schema's, else all). A missing shard raises
    MissingArtifactError and a changed one HashMismatchError, each naming the file. `schema`
    (column -> type) leads the concatenation, so no task gives an empty frame of those types."""
    lead = [] if schema is None else [pl.DataFrame(schema=schema)]
    columns = list(schema) if columns is None and schema is not None else columns
    return pl.concat([*lead, *(pl.read_parquet(io.BytesIO(store.get_bytes(shard_file(bank, t))), columns=columns)
                               for t in task_ids)])


def load_shards(store: Store, bank: str, task_ids: list[str],
                schema: dict) -> tuple[pl.DataFrame, dict[str, str], list[str]]:
    """Every present shard of a bank that verifies, concatenated; their digests (each shard read
    and hashed once); and the hash-parity problems of those that do not verify."""
    frames, digests, parity = [pl.DataFrame(schema=schema)], {}, []
    for task_id in task_ids:
        name = shard_file(bank, task_id)
        if not store.exists(name):
            continue
        try:
            data, digests[task_id] = store.read(name)
        except HashMismatchError as exc:  # names the shard; reported by the check, not raised
            parity.append(str(exc))
            continue
        frames.append(pl.read_parquet(io.BytesIO(data)))
    return pl.concat(frames), digests, parity


def export_bank(store: Store, bank: str, task_ids: list[str], out_dir: str | Path) -> str:
    """Write `out_dir/index.json` and a verbatim copy of every shard; return the index SHA-256."""
    out = Path(out_dir)
    index = bank_index(bank, {t: store.verify(shard_file(bank, t)) for t in task_ids},
                       key_digests(store, bank, task_ids))
    for task_id, entry in index["tasks"].items():
        for name, member in ((shard_file(bank, task_id), "shard"), (key_file(bank, task_id), "key")):
            if member in entry:
                (out / entry[member]).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(store.path(name), out / entry[member])
                shutil.copyfile(store.receipt_path(name), out / (entry[member] + RECEIPT_SUFFIX))
    data = json_bytes(index)
    write_atomic(out / "index.json", data)
    return sha256_bytes(data)


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    shard: Annotated[str, Field(min_length=1)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    key: Annotated[str, Field(min_length=1)] | None = None  # what made the shard (banks exported with keys)
    key_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None


class _Index(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    format: Literal[INDEX_FORMAT]
    bank: str
    tasks: dict[Annotated[str, Field(pattern=TASK_ID)], _Entry]


class InheritedBank:
    """A verified inherited bank; construction fails (naming the index, shard or receipt and the
    field) before any import: the index's digest and shape, each shard inside the folder, its
    digest, a receipt beside it (where there is one) agreeing, and, given the bank's `schema`, each
    shard a Parquet file of exactly those columns holding its own task's rows only."""

    def __init__(self, index_path: str | Path, expected_sha256: str, schema: dict | None = None):
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
        self.tasks = {t: e.model_dump() for t, e in self._parse(data).tasks.items()}
        for task_id, entry in self.tasks.items():  # every shard inside the bank's own folder, before any is read
            inside(self.index_path.parent, entry["shard"], f"{self.index_path}: task {task_id}'s shard")
            if entry["key"] is not None:
                self._check_key(task_id, inside(self.index_path.parent, entry["key"], f"task {task_id}'s key"))
        for task_id in self.tasks:
            data = self._path(task_id).read_bytes()
            self._check(task_id, sha256_bytes(data))
            self._check_receipt(task_id)
            if schema is not None:
                self._check_shard(task_id, data, schema)

    def _check_key(self, task_id: str, path: Path) -> None:
        """The key an exported shard carries must be the one its index recorded (it is imported with it)."""
        entry = self.tasks[task_id]
        actual = sha256_bytes(path.read_bytes()) if path.is_file() else "(missing)"
        if actual != entry["key_sha256"]:
            raise HashMismatchError(f"{path}: key of inherited task {task_id} has SHA-256 {actual} but the index "
                                    f"records {entry['key_sha256']}; nothing was imported. Re-export the bank")

    def _parse(self, data: bytes) -> _Index:
        try:
            return _Index.model_validate(parse_json(data, str(self.index_path), BankFormatError))
        except ValidationError as exc:
            err = exc.errors()[0]
            field = error_field(err)
            raise BankFormatError(f"{self.index_path}: field {field!r}: {err['msg']}; an inherited index is "
                                  "written by `apsft export-bank`, never by hand") from None

    def _check_receipt(self, task_id: str) -> None:
        receipt = self._path(task_id).with_name(self._path(task_id).name + RECEIPT_SUFFIX)
        if not receipt.is_file():
            return  # the index is the bank's record; a receipt, where exported, must agree with it
        doc = parse_json(receipt.read_bytes(), str(receipt), BankFormatError)
        if not isinstance(doc, dict) or doc.get("sha256") != self.tasks[task_id]["sha256"]:
            raise HashMismatchError(f"{receipt}: field 'sha256' disagrees with the index's entry for task {task_id}; "
                                    "nothing was imported. Re-export the bank")

    def _check_shard(self, task_id: str, data: bytes, schema: dict) -> None:
        where = self._path(task_id)
        try:
            frame = pl.read_parquet(io.BytesIO(data))
        except Exception as exc:  # polars raises its own types for every kind of bad file  # noqa: BLE001
            raise BankFormatError(f"{where}: not a readable Parquet shard ({type(exc).__name__}); re-export it") \
                from None
        if dict(frame.schema) != dict(schema):
            diff = sorted(set(frame.schema.items()) ^ set(schema.items()), key=str)[:3]
            raise BankFormatError(f"{where}: columns differ from the bank's schema (e.g. {diff}); it was exported by "
                                  "another version of the protocol. Re-harvest or re-export it")
        others = frame.filter(pl.col("task_id") != task_id)["task_id"].unique().to_list()
        if others:
            raise BankFormatError(f"{where}: field 'task_id' holds other tasks {others[:3]}; the shard of task "
                                  f"{task_id} must hold its rows only")

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
