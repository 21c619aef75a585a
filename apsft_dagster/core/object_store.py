"""The artifact store on S3-compatible object storage, with the local store's receipt rules.

`open_store("s3://bucket/prefix")` gives an `ObjectStore`; any other location the local `Store`.
The bucket is the truth; a local mirror (`$APSFT_STATE_DIR/object_mirror/<bucket>/<prefix>`)
holds verified copies for the code that reads an artifact as a file or folder (models loaded by
path, Parquet scans, DuckDB views).

Receipts keep their meaning: an artifact counts only once its receipt object exists; a write
deletes the old receipt first, uploads the data (each S3 PUT is atomic: an object is there whole
or not at all) and puts the receipt last, so a crash between data and receipt leaves an object
without a receipt, which counts as absent. `verify` and `read` hash what the bucket holds against
the receipt and name the object's URL when they differ; `path` compares the mirror's receipt with
the bucket's and fetches (verifying every byte) when they differ.

Library: obstore (Rust's object_store crate behind a small Python API): atomic PUTs, no Python
dependency chain (s3fs would bring aiobotocore and its pinned botocore), and the same calls
for GCS and Azure later. Connection settings come from the usual AWS variables
(`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`); an `http://`
endpoint (MinIO, a test server) is allowed as such. obstore retries 5xx answers, dropped
connections and cut reads (resuming a read by range) up to `APSFT_S3_RETRIES` times (default
10); a request that still fails raises ObjectStoreError naming the object's URL.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Callable
from pathlib import Path

from apsft_dagster.core.errors import HashMismatchError, MissingArtifactError, ObjectStoreError, StorePathError
from apsft_dagster.core.json_input import parse_json
from apsft_dagster.core.paths import OBJECT_SCHEME as SCHEME
from apsft_dagster.core.paths import is_object_url, state_dir
from apsft_dagster.core.store import RECEIPT_SUFFIX, Store, inside, match_digest, sha256_bytes


def open_store(location: str | os.PathLike) -> Store:
    """The store at `location`: an S3 URL or a local folder."""
    return ObjectStore(str(location)) if is_object_url(location) else Store(location)


def default_mirror(url: str) -> Path:

    return state_dir() / "object_mirror" / url[len(SCHEME):].strip("/")


def _client(url: str):
    from obstore.store import S3Store

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
    options = {"allow_http": True} if endpoint.startswith("http://") else None
    retries = os.environ.get("APSFT_S3_RETRIES")  # obstore's default: 10, with exponential backoff
    retry = {"max_retries": int(retries)} if retries else None
    return S3Store.from_url(url, client_options=options, retry_config=retry)


class ObjectStore(Store):
    """Artifacts addressed by a relative name under `s3://bucket/prefix` (see the module doc)."""

    def __init__(self, url: str, mirror: str | os.PathLike | None = None, client=None):
        bucket = url[len(SCHEME):].split("/", 1)[0] if is_object_url(url) else ""
        if not bucket:
            raise StorePathError(f"store {url!r}: an object store location is s3://BUCKET[/PREFIX]")
        self.url = url.rstrip("/")
        self.mirror = Store(mirror if mirror is not None else default_mirror(self.url))
        self.root = self.mirror.root
        self.remote = client if client is not None else _client(self.url)

    def location(self, name: str) -> str:
        inside(self.root, name, "artifact name")
        return f"{self.url}/{name}"

    # -- the bucket ------------------------------------------------------------------------
    def _get(self, key: str) -> bytes | None:
        import obstore

        with self._failing("GET", key):
            try:
                return bytes(obstore.get(self.remote, key).bytes())
            except FileNotFoundError:
                return None

    def _put(self, key: str, data: bytes) -> None:
        import obstore

        with self._failing("PUT", key):
            obstore.put(self.remote, key, data)

    def _delete(self, key: str) -> None:
        import obstore

        with self._failing("DELETE", key):
            try:
                obstore.delete(self.remote, key)
            except FileNotFoundError:
                pass

    def _keys_under(self, name: str) -> list[str]:
        import obstore

        with self._failing("LIST", name + "/"):
            return sorted(meta["path"] for batch in obstore.list(self.remote, prefix=name + "/") for meta in batch)

    @contextlib.contextmanager
    def _failing(self, method: str, key: str):
        """obstore retries 5xx answers, dropped connections and cut reads itself (10 tries, with
        backoff); what still fails is named here by its URL, the artifact left uncounted."""
        from obstore.exceptions import BaseError

        try:
            yield
        except BaseError as exc:
            first = str(exc).strip().splitlines()[0][:300]
            raise ObjectStoreError(f"{self.url}/{key}: {method} failed after the client's retries ({first}); an "
                                   "artifact counts only once its receipt is in the bucket, so rerun the stage to "
                                   "resume") from None

    def _remote_receipt(self, name: str) -> dict | None:
        data = self._get(name + RECEIPT_SUFFIX)
        return None if data is None else parse_json(data, self.location(name + RECEIPT_SUFFIX), HashMismatchError)

    # -- writing ---------------------------------------------------------------------------
    def put_bytes(self, name: str, data: bytes) -> str:
        self.location(name)  # the name is checked before anything is written
        self.mirror.pin_anchor(self.anchor_sha256())  # the bucket's anchor, not the mirror's copy of it
        self._delete(name + RECEIPT_SUFFIX)
        self._put(name, data)
        digest = self.mirror.put_bytes(name, data)
        self._put(name + RECEIPT_SUFFIX, self.mirror.receipt_path(name).read_bytes())
        return digest

    def put_dir(self, name: str, fill: Callable[[Path], None]) -> str:
        self.location(name)
        self.mirror.pin_anchor(self.anchor_sha256())
        self._delete(name + RECEIPT_SUFFIX)
        digest = self.mirror.put_dir(name, fill)
        local, files = self.mirror.path(name), self.mirror.receipt(name)["files"]
        for relative in files:
            self._put(f"{name}/{relative}", (local / relative).read_bytes())
        for stale in set(self._keys_under(name)) - {f"{name}/{r}" for r in files}:
            self._delete(stale)
        self._put(name + RECEIPT_SUFFIX, self.mirror.receipt_path(name).read_bytes())
        return digest

    def remove(self, name: str) -> None:
        """Receipt first, so a crash midway leaves nothing that counts."""
        self.location(name)
        self._delete(name + RECEIPT_SUFFIX)
        for key in [name, *self._keys_under(name)]:
            self._delete(key)
        self.mirror.remove(name)

    # -- reading ---------------------------------------------------------------------------
    def receipt(self, name: str) -> dict:
        self.location(name)
        receipt = self._remote_receipt(name)
        if receipt is None:
            raise MissingArtifactError(f"{self.location(name)}: artifact or its receipt is missing; "
                                       "materialize it first")
        return receipt

    def exists(self, name: str) -> bool:
        import obstore

        self.location(name)
        receipt = self._remote_receipt(name)
        if receipt is None:
            return False
        if "files" in receipt:
            return True  # each file is checked when it is read or verified
        with self._failing("HEAD", name):
            try:
                obstore.head(self.remote, name)
                return True
            except FileNotFoundError:
                return False

    def read(self, name: str) -> tuple[bytes, str]:
        return self._fetch_file(name, self.receipt(name))

    def _fetch_file(self, name: str, receipt: dict) -> tuple[bytes, str]:
        """The object's bytes, hashed against `receipt` (the bucket's), refreshing the mirror."""
        data = self._get(name)
        if data is None:
            raise MissingArtifactError(f"{self.location(name)}: the receipt is there but the object is not; "
                                       "rematerialize it")
        digest = self._match_remote(name, sha256_bytes(data), receipt["sha256"])
        if not self._mirrored(name, receipt):
            self.mirror.put_bytes(name, data)
        return data, digest

    def verify(self, name: str) -> str:
        """Hash what the bucket holds against its receipt (the mirror is refreshed on the way)."""
        receipt = self.receipt(name)
        if "files" not in receipt:
            return self._fetch_file(name, receipt)[1]
        self._fetch_dir(name, receipt)
        return receipt["sha256"]

    def path(self, name: str) -> Path:
        """The artifact as a local file or folder: the mirror's copy, fetched and verified first when
        the bucket's receipt differs from the mirror's (or the mirror has none), dropped when the
        bucket no longer has it."""
        local = self.mirror.path(name)
        receipt = self._remote_receipt(name)
        if receipt is None:
            if self.mirror.exists(name):  # removed from the bucket (elsewhere): the mirror must not serve it
                self.mirror.remove(name)
        elif not self._mirrored(name, receipt):
            if "files" in receipt:
                self._fetch_dir(name, receipt)
            else:
                self._fetch_file(name, receipt)
        return local

    def local_files(self, pattern: str) -> list[Path]:
        import obstore

        folder = pattern.split("*", 1)[0].rpartition("/")[0]  # list only under the pattern's fixed folder
        with self._failing("LIST", folder + "/"):
            keys = [meta["path"] for batch in obstore.list(self.remote, prefix=folder + "/" if folder else None)
                    for meta in batch]
        for key in keys:
            name = key.removesuffix(RECEIPT_SUFFIX)
            if key.endswith(RECEIPT_SUFFIX) and fnmatch.fnmatchcase(name, pattern):
                self.path(name)
        return self.mirror.local_files(pattern)

    def receipt_path(self, name: str) -> Path:
        self.path(name)
        return self.mirror.receipt_path(name)

    def _fetch_dir(self, name: str, receipt: dict) -> None:
        blobs = {}
        for relative, expected in receipt["files"].items():
            data = self._get(f"{name}/{relative}")
            if data is None:
                raise MissingArtifactError(f"{self.location(name)}/{relative}: listed in the receipt but not in "
                                           "the bucket; rematerialize it")
            self._match_remote(f"{name}/{relative}", sha256_bytes(data), expected)
            blobs[relative] = data

        def fill(folder: Path) -> None:
            for relative, data in blobs.items():
                (folder / relative).parent.mkdir(parents=True, exist_ok=True)
                (folder / relative).write_bytes(data)

        self.mirror.put_dir(name, fill)

    def _mirrored(self, name: str, receipt: dict) -> bool:
        """The mirror holds the bucket's bytes (the design anchor a receipt cites says nothing about them)."""
        return self.mirror.exists(name) and _bytes_of(self.mirror.receipt(name)) == _bytes_of(receipt)

    def _match_remote(self, key: str, actual: str, expected: str) -> str:
        return match_digest(f"{self.url}/{key}", actual, expected, "object")


def _bytes_of(receipt: dict) -> dict:
    return {k: v for k, v in receipt.items() if k != "anchor"}
