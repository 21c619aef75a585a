"""The S3 store under injected faults (tests/fault_proxy.py between obstore and moto's server):
500s and dropped connections mid-upload, mid-receipt and mid-read. What the client retries
succeeds with the same bytes; what still fails is named by its URL, leaves nothing counted
(no receipt in the bucket), and a rerun resumes to the bytes an unfaulted write gives."""

import os

import pytest

from apsft_dagster.core.errors import ObjectStoreError
from apsft_dagster.core.object_store import open_store
from apsft_dagster.core.store import RECEIPT_SUFFIX
from conftest import moto_s3
from fault_proxy import Fault, FaultProxy

BUCKET = "faults"
DATA = b'{"rows": ' + b"[1, 2, 3], " * 2000 + b'"end": 1}'


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(boto3 client on the server itself, the proxy the store talks through)."""
    with moto_s3(BUCKET) as (client, upstream), pytest.MonkeyPatch.context() as mp:
        proxy = FaultProxy(upstream)
        for name, value in {"AWS_ENDPOINT_URL": proxy.url, "AWS_ACCESS_KEY_ID": "test",
                            "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}.items():
            mp.setenv(name, value)
        mp.setenv("APSFT_STATE_DIR", str(tmp_path_factory.mktemp("fault_state")))
        mp.setenv("APSFT_S3_RETRIES", "3")  # the client's retries, fewer than its 10: a lasting fault fails sooner
        yield client, proxy
        proxy.close()


def _objects(client, prefix: str) -> dict[str, bytes]:
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {o["Key"][len(prefix):]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed}


def _reference(client, proxy, prefix: str) -> dict[str, bytes]:
    proxy.inject()
    store = open_store(f"s3://{BUCKET}/{prefix}")
    store.put_bytes("bank/a.json", DATA)
    store.put_dir("model", _fill)
    return _objects(client, f"{prefix}/")


def _fill(folder):
    (folder / "weights.bin").write_bytes(bytes(range(256)) * 64)
    (folder / "config.json").write_bytes(b'{"layers": 2}')


TRANSIENT = [  # (method, which object, fault): each fires once and the client's retry absorbs it
    ("PUT", "bank/a.json", "500"), ("PUT", "bank/a.json", "drop"),  # mid-upload
    ("PUT", "bank/a.json" + RECEIPT_SUFFIX, "500"), ("PUT", "bank/a.json" + RECEIPT_SUFFIX, "drop"),  # mid-receipt
    ("PUT", "model/weights.bin", "drop"), ("PUT", "model" + RECEIPT_SUFFIX, "500"),
    ("GET", "bank/a.json", "cut"), ("GET", "bank/a.json", "500"), ("GET", "bank/a.json" + RECEIPT_SUFFIX, "drop"),
]


@pytest.mark.parametrize("method, key, kind", TRANSIENT)
def test_a_fault_the_client_retries_leaves_the_same_bytes(s3, method, key, kind):
    client, proxy = s3
    prefix = f"t-{method}-{kind}-{key.replace('/', '_')}"
    reference = _reference(client, proxy, f"{prefix}-ref")
    store = open_store(f"s3://{BUCKET}/{prefix}")
    proxy.inject(Fault(method, key, kind, times=1))
    store.put_bytes("bank/a.json", DATA)
    store.put_dir("model", _fill)
    assert store.get_bytes("bank/a.json") == DATA and store.verify("model")
    assert proxy.fired() == 1, proxy.seen  # the fault did happen
    assert _objects(client, f"{prefix}/") == reference


PERSISTENT = [  # (method, object, fault, the artifact it breaks)
    ("PUT", "bank/a.json", "500", "bank/a.json"),  # mid-upload
    ("PUT", "bank/a.json" + RECEIPT_SUFFIX, "drop", "bank/a.json"),  # mid-receipt: the data is up, no receipt
    ("PUT", "model/config.json", "drop", "model"),  # a folder artifact's second file
    ("PUT", "model" + RECEIPT_SUFFIX, "500", "model"),
]


@pytest.mark.parametrize("method, key, kind, artifact", PERSISTENT)
def test_a_fault_that_outlasts_the_retries_fails_by_url_counts_nothing_and_resumes(s3, method, key, kind, artifact):
    client, proxy = s3
    prefix = f"p-{method}-{kind}-{key.replace('/', '_')}"
    reference = _reference(client, proxy, f"{prefix}-ref")
    store = open_store(f"s3://{BUCKET}/{prefix}")
    proxy.inject(Fault(method, key, kind, times=None))
    with pytest.raises(ObjectStoreError, match=f"s3://{BUCKET}/{prefix}/{key}: {method} failed after the client"):
        store.put_bytes("bank/a.json", DATA)
        store.put_dir("model", _fill)
    assert proxy.fired() > 1  # retried before giving up
    proxy.inject()
    assert f"{artifact}{RECEIPT_SUFFIX}" not in _objects(client, f"{prefix}/")  # nothing half-counted
    assert not open_store(f"s3://{BUCKET}/{prefix}").exists(artifact)
    store.put_bytes("bank/a.json", DATA)  # the rerun: whole, and the same bytes as a write that never failed
    store.put_dir("model", _fill)
    assert _objects(client, f"{prefix}/") == reference


def test_a_read_that_keeps_failing_is_named_and_a_later_read_verifies(s3):
    client, proxy = s3
    _reference(client, proxy, "r")
    store = open_store(f"s3://{BUCKET}/r")
    proxy.inject(Fault("GET", "r/bank/a.json", "cut", times=None))
    with pytest.raises(ObjectStoreError, match=f"s3://{BUCKET}/r/bank/a.json: GET failed"):
        store.get_bytes("bank/a.json")
    proxy.inject()
    assert store.get_bytes("bank/a.json") == DATA
    assert os.environ["AWS_ENDPOINT_URL"] == proxy.url  # every request above went through the proxy
