import gzip
import json
import subprocess
import sys

import polars as pl
import pytest

from apsft_dagster.core.errors import HashMismatchError, MissingArtifactError
from apsft_dagster.core.store import Store, fingerprint, sha256_bytes

FRAME_CODE = """
import polars as pl, sys
from apsft_dagster.core.store import Store
frame = pl.DataFrame({"task_id": ["b", "a"], "gain": [0.25, -1.5], "n": [3, 4]})
Store(sys.argv[1]).put_parquet("t.parquet", frame)
Store(sys.argv[1]).put_jsonl_gz("t.jsonl.gz", [{"b": 1, "a": "x"}, {"a": "y", "b": 2}])
"""


def test_writes_are_byte_identical_across_fresh_processes(tmp_path):
    for name in ("one", "two"):
        subprocess.run([sys.executable, "-c", FRAME_CODE, str(tmp_path / name)], check=True)
    for artifact in ("t.parquet", "t.jsonl.gz"):
        assert (tmp_path / "one" / artifact).read_bytes() == (tmp_path / "two" / artifact).read_bytes()
    store = Store(tmp_path / "one")
    assert store.get_parquet("t.parquet").equals(
        pl.DataFrame({"task_id": ["b", "a"], "gain": [0.25, -1.5], "n": [3, 4]}))
    raw = gzip.decompress(store.get_bytes("t.jsonl.gz")).decode().splitlines()
    assert raw == ['{"a": "x", "b": 1}', '{"a": "y", "b": 2}']  # sorted keys
    assert store.get_bytes("t.jsonl.gz")[4:8] == b"\0\0\0\0"  # gzip mtime field is 0


def test_receipt_holds_the_sha256_and_a_tampered_file_is_named(tmp_path):
    store = Store(tmp_path)
    digest = store.put_json("a/report.json", {"z": 1, "a": [1, 2]})
    assert digest == sha256_bytes(store.path("a/report.json").read_bytes())
    assert json.loads(store.receipt_path("a/report.json").read_text())["sha256"] == digest
    assert store.get_json("a/report.json") == {"z": 1, "a": [1, 2]}
    store.path("a/report.json").write_text('{"a": [1, 2], "z": 2}\n')
    with pytest.raises(HashMismatchError,
                       match=r"a/report\.json: SHA-256 is [0-9a-f]{64} but its receipt says " + digest):
        store.get_json("a/report.json")
    with pytest.raises(HashMismatchError):
        store.verify("a/report.json")


def test_data_without_receipt_counts_as_absent(tmp_path):
    store = Store(tmp_path)
    store.path("x.json").write_text("{}")  # a crash after the data rename, before the receipt
    assert not store.exists("x.json")
    with pytest.raises(MissingArtifactError, match="x.json: artifact or its receipt is missing"):
        store.get_json("x.json")


def test_atomic_write_leaves_no_temp_files(tmp_path):
    store = Store(tmp_path)
    for i in range(3):
        store.put_bytes("blob.bin", bytes([i]) * 100)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob.bin", "blob.bin.receipt.json"]
    assert store.get_bytes("blob.bin") == bytes([2]) * 100


def test_directory_artifact_fingerprint_and_tamper(tmp_path):
    store = Store(tmp_path)

    def fill(d):
        (d / "config.json").write_text("{}")
        (d / "sub").mkdir()
        (d / "sub" / "w.bin").write_bytes(b"\x01\x02")

    digest = store.put_dir("model", fill)
    expected = {"config.json": sha256_bytes(b"{}"), "sub/w.bin": sha256_bytes(b"\x01\x02")}
    assert digest == fingerprint(expected) == store.verify("model")
    assert store.put_dir("model", fill) == digest  # replacing with equal content keeps the fingerprint
    (store.path("model") / "sub" / "w.bin").write_bytes(b"\x01\x03")
    with pytest.raises(HashMismatchError, match=r"files \['sub/w.bin'\] differ"):
        store.verify("model")
