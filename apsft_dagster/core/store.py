"""The deterministic store: atomic, byte-deterministic, receipted artifacts.

Every artifact `a` under the store root has a sidecar `a.receipt.json` holding its SHA-256
(for a directory: every file's SHA-256 and a fingerprint over them). Data is written first
(temp file, fsync, rename), the receipt last, so a crash leaves either a verified artifact or
one without a receipt, which counts as absent. Reading always verifies.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

import polars as pl

from apsft_dagster.core.errors import HashMismatchError, MissingArtifactError, StorePathError, StoreWriteError
from apsft_dagster.core.json_input import parse_json
from apsft_dagster.core.layout import DESIGN_ANCHOR

RECEIPT_SUFFIX = ".receipt.json"
PARQUET_SETTINGS = {"compression": "zstd", "compression_level": 3, "statistics": False, "row_group_size": 65536}


def inside(root: Path, name: str, what: str) -> Path:
    """`root / name`, provided it stays under `root`: relative, no `..`, and no symlink among its
    components that points outside (only links are resolved, so the check costs an lstat per part)."""
    pure = PurePosixPath(name) if isinstance(name, str) else None
    if not name or pure is None or pure.is_absolute() or ".." in pure.parts or "\x00" in name:
        raise StorePathError(f"{what} {name!r}: must be a relative path without '..' inside {root}; refused")
    current = Path(root)
    for part in pure.parts:
        current = current / part
        if current.is_symlink() and not current.resolve().is_relative_to(Path(root).resolve()):
            raise StorePathError(f"{what} {name!r}: {current} points to {current.resolve()}, outside "
                                 f"{Path(root).resolve()}; refused")
    return Path(root) / name


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def match_digest(where: str, actual: str, expected: str, what: str = "file") -> str:
    """`actual`, or HashMismatchError naming `where` (a path or an object's URL) when it is not `expected`."""
    if actual != expected:
        raise HashMismatchError(
            f"{where}: SHA-256 is {actual} but its receipt says {expected}; the {what} changed after it was "
            "written. Restore it, or delete it and its receipt and rematerialize")
    return actual


def json_bytes(obj: object) -> bytes:
    """Sorted keys, fixed separators, UTF-8, trailing newline: one byte form per value."""
    return (json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()


def json_scalar(value: object) -> object:
    """A JSON scalar as it is; anything richer (structs, lists, metadata objects) as its text."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def parquet_bytes(frame: pl.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.write_parquet(buffer, **PARQUET_SETTINGS)
    return buffer.getvalue()


def jsonl_gz_bytes(rows: Iterable[dict]) -> bytes:
    """gzip with mtime 0 and no file name, so equal rows give equal bytes."""
    body = b"".join(json.dumps(r, sort_keys=True, ensure_ascii=False).encode() + b"\n" for r in rows)
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(body)
    return buffer.getvalue()


def write_atomic(path: Path, data: bytes) -> None:
    """`data` at `path` whole or not at all: a temp sibling, fsynced, renamed over. A write that
    fails (a full disk) removes the temp file and raises StoreWriteError naming the path."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_failed(path, exc) from exc


def write_failed(path: Path, exc: OSError) -> StoreWriteError:
    return StoreWriteError(exc.errno, f"{path}: writing it failed ({exc.strerror or exc}); nothing of it was kept "
                                      "and no receipt counts it. Free space (or fix the folder) and rerun: the stage "
                                      "resumes from its last whole artifact")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dir_digests(directory: Path) -> dict[str, str]:
    return {p.relative_to(directory).as_posix(): sha256_file(p)
            for p in sorted(directory.rglob("*")) if p.is_file()}


def fingerprint(file_digests: dict[str, str]) -> str:
    """SHA-256 over the sorted (relative path -> SHA-256) map of a directory's files."""
    return sha256_bytes(json.dumps(file_digests, sort_keys=True, separators=(",", ":")).encode())


class Store:
    """Artifacts addressed by a relative name under one root (one root per profile)."""

    _anchor: tuple[str | None] | None = None  # (the design anchor's SHA-256 or None,) once read; None: not yet

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def path(self, name: str) -> Path:
        """The artifact's path, refused (before anything is read or written) when the name is absolute,
        climbs out (`../x`, `a/../../x`) or runs through a symlink that points outside the root."""
        return inside(self.root, name, "artifact name")

    def local_files(self, pattern: str) -> list[Path]:
        """The files matching a glob pattern relative to the root, on this machine's disk (an object
        store fetches the matching artifacts into its mirror first)."""
        return sorted(self.root.glob(pattern))

    def receipt_path(self, name: str) -> Path:
        path = self.path(name)  # the artifact's own name is checked first
        return path.with_name(path.name + RECEIPT_SUFFIX)

    # -- writing ---------------------------------------------------------------------------
    def put_bytes(self, name: str, data: bytes) -> str:
        digest = sha256_bytes(data)
        self.receipt_path(name).unlink(missing_ok=True)  # invalidated before the artifact is replaced
        write_atomic(self.path(name), data)
        self._write_receipt(name, {"artifact": name, "bytes": len(data), "sha256": digest})
        return digest

    def put_json(self, name: str, obj: object) -> str:
        return self.put_bytes(name, json_bytes(obj))

    def put_parquet(self, name: str, frame: pl.DataFrame) -> str:
        return self.put_bytes(name, parquet_bytes(frame))

    def put_jsonl_gz(self, name: str, rows: Iterable[dict]) -> str:
        return self.put_bytes(name, jsonl_gz_bytes(rows))

    def put_dir(self, name: str, fill: Callable[[Path], None]) -> str:
        """Build a directory artifact in a temp sibling, fsync it, swap it in, then receipt it."""
        final = self.path(name)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir()
            fill(tmp)
            for p in tmp.rglob("*"):
                if p.is_file():
                    p.chmod(0o644)  # like every other artifact, whatever mode the filler (save_pretrained) chose
                    with open(p, "rb") as fh:
                        os.fsync(fh.fileno())
        except OSError as exc:  # a full disk mid-fill: the half-built folder goes, nothing counts it
            shutil.rmtree(tmp, ignore_errors=True)
            raise exc if isinstance(exc, StoreWriteError) else write_failed(final, exc) from exc
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        files = dir_digests(tmp)
        self.receipt_path(name).unlink(missing_ok=True)  # never a receipt beside a half-swapped dir
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
        _fsync_dir(final.parent)
        digest = fingerprint(files)
        self._write_receipt(name, {"artifact": name, "files": files, "sha256": digest})
        return digest

    def remove(self, name: str) -> None:
        """Receipt first, so a crash midway leaves nothing that counts."""
        self.receipt_path(name).unlink(missing_ok=True)
        path = self.path(name)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)

    def _write_receipt(self, name: str, receipt: dict) -> None:
        anchor = None if name == DESIGN_ANCHOR else self.anchor_sha256()  # a store without one: today's receipts
        write_atomic(self.receipt_path(name), json_bytes({**receipt, "anchor": anchor} if anchor else receipt))

    def anchor_sha256(self) -> str | None:
        """The design anchor's SHA-256 (`apsft freeze`, core/anchor.py), which every later receipt cites;
        read once per Store object, so a write costs no extra read."""
        if self._anchor is None:
            self._anchor = (self.receipt(DESIGN_ANCHOR)["sha256"] if self.exists(DESIGN_ANCHOR) else None,)
        return self._anchor[0]

    def pin_anchor(self, sha256: str | None) -> None:
        """Receipts written from now on cite `sha256` (freeze pins the anchor it wrote)."""
        self._anchor = (sha256,)

    # -- reading ---------------------------------------------------------------------------
    def receipt(self, name: str) -> dict:
        path = self.receipt_path(name)
        if not path.is_file() or not self.path(name).exists():
            raise MissingArtifactError(
                f"{self.path(name)}: artifact or its receipt is missing; materialize it first")
        receipt = parse_json(path.read_bytes(), str(path), HashMismatchError)
        if not (isinstance(receipt, dict) and isinstance(receipt.get("sha256"), str)):
            raise HashMismatchError(f"{path}: not a receipt (no 'sha256'); delete it and the artifact and "
                                    "rematerialize")
        return receipt

    def exists(self, name: str) -> bool:
        return self.receipt_path(name).is_file() and self.path(name).exists()

    def verify(self, name: str) -> str:
        """Re-hash the artifact against its receipt; return the digest or raise HashMismatchError."""
        receipt = self.receipt(name)
        path = self.path(name)
        if "files" in receipt:
            actual_files = dir_digests(path)
            if actual_files != receipt["files"]:
                changed = sorted(k for k in set(actual_files) | set(receipt["files"])
                                 if actual_files.get(k) != receipt["files"].get(k))
                raise HashMismatchError(
                    f"{path}: files {changed} differ from the receipt {self.receipt_path(name)}; "
                    "restore them, or delete the directory and its receipt and rematerialize")
            return receipt["sha256"]
        return self._match(name, sha256_file(path), receipt["sha256"])

    def _match(self, name: str, actual: str, expected: str) -> str:
        return match_digest(str(self.path(name)), actual, expected)

    def read(self, name: str) -> tuple[bytes, str]:
        """The artifact's bytes, read and hashed once, with the digest its receipt confirmed."""
        receipt = self.receipt(name)
        data = self.path(name).read_bytes()
        return data, self._match(name, sha256_bytes(data), receipt["sha256"])

    def get_bytes(self, name: str) -> bytes:
        return self.read(name)[0]

    def get_json(self, name: str) -> object:
        return json.loads(self.get_bytes(name))

    def get_parquet(self, name: str) -> pl.DataFrame:
        return pl.read_parquet(io.BytesIO(self.get_bytes(name)))


def completed(store: Store, report: str, artifact: str) -> bool:
    """A stage's artifact counts once its report (written last) exists and the artifact verifies
    (HashMismatchError, naming the file, when it was changed after writing)."""
    if not store.exists(report):
        return False
    store.verify(artifact)
    return True
