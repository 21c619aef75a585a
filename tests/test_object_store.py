"""The artifact store on S3: a real S3-compatible server (moto's server mode) on 127.0.0.1.

The store is reached only over HTTP by obstore; the tests look at the bucket with boto3, a second
client, so what they see is what the server holds.
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import dagster as dg
import pytest

from apsft_dagster.core.bank import InheritedBank, export_bank
from apsft_dagster.core.errors import HashMismatchError, MissingArtifactError, StorePathError
from apsft_dagster.core.layout import BASE_MODEL_DIR, BASE_MODEL_REPORT, TASK_CATALOG, key_file, shard_file
from apsft_dagster.core.layout import TRACE_BANK as BANK
from apsft_dagster.core.object_store import ObjectStore, open_store
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.store import RECEIPT_SUFFIX, Store
from apsft_dagster.experiment.assets.trace_bank import trace_bank, trace_bank_index
from apsft_dagster.experiment.partitions import train_task_partitions
from apsft_dagster.run_tags import single_run_tags
from conftest import moto_s3, smoke_resources

KEYS = train_task_partitions.get_partition_keys()
BUCKET = "apsft"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(boto3 client, endpoint): moto's S3 server on a free local port, the AWS variables set."""
    with moto_s3(BUCKET) as (client, endpoint), pytest.MonkeyPatch.context() as mp:
        for name, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test",
                            "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}.items():
            mp.setenv(name, value)
        mp.setenv("APSFT_STATE_DIR", str(tmp_path_factory.mktemp("s3_state")))  # the mirrors live here
        yield client, endpoint


def _keys(client, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def test_receipts_keep_their_meaning_on_the_bucket(s3, tmp_path):
    client, _ = s3
    store = open_store(f"s3://{BUCKET}/unit")
    assert isinstance(store, ObjectStore) and store.root.is_relative_to(os.environ["APSFT_STATE_DIR"])
    store.put_json("a/b.json", {"x": 1})
    assert _keys(client, "unit/") == ["unit/a/b.json", "unit/a/b.json" + RECEIPT_SUFFIX]
    assert store.exists("a/b.json") and store.get_json("a/b.json") == {"x": 1}

    # a crash between data and receipt: the object is there, its receipt is not, so it does not count
    client.put_object(Bucket=BUCKET, Key="unit/half.json", Body=b"{}")
    assert not store.exists("half.json")
    with pytest.raises(MissingArtifactError, match=f"s3://{BUCKET}/unit/half.json"):
        store.get_bytes("half.json")

    def fill(folder):
        (folder / "w").mkdir()
        (folder / "w" / "model.bin").write_bytes(b"\x01" * 1000)
        (folder / "config.json").write_text("{}")

    digest = store.put_dir("model", fill)
    elsewhere = ObjectStore(f"s3://{BUCKET}/unit", mirror=tmp_path / "other_mirror")  # another machine
    assert elsewhere.exists("model") and elsewhere.verify("model") == digest
    assert (elsewhere.path("model") / "w" / "model.bin").read_bytes() == b"\x01" * 1000

    client.put_object(Bucket=BUCKET, Key="unit/model/w/model.bin", Body=b"\x02" * 1000)  # tampered in the bucket
    with pytest.raises(HashMismatchError, match=f"s3://{BUCKET}/unit/model/w/model.bin: SHA-256"):
        elsewhere.verify("model")
    client.put_object(Bucket=BUCKET, Key="unit/a/b.json", Body=b'{"x": 2}\n')
    with pytest.raises(HashMismatchError, match=f"s3://{BUCKET}/unit/a/b.json: SHA-256"):
        ObjectStore(f"s3://{BUCKET}/unit", mirror=tmp_path / "third").get_json("a/b.json")

    store.remove("model")
    assert not _keys(client, "unit/model")
    assert not elsewhere.path("model").exists()  # the other machine's mirror does not serve what the bucket lost
    for bad in ("../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(StorePathError):
            store.put_bytes(bad, b"no")
    assert "unit/x" not in _keys(client, "") and "x" not in _keys(client, "")
    with pytest.raises(StorePathError, match="s3://BUCKET"):
        ObjectStore("s3://")


def _bucket_without_bank(reference: Store, url: str, keep: int) -> ObjectStore:
    """The smoke run's catalog and base model uploaded to `url`, with the first `keep` shards."""
    store = ObjectStore(url)
    for receipt in sorted(reference.root.rglob("*" + RECEIPT_SUFFIX)):
        name = receipt.relative_to(reference.root).as_posix().removesuffix(RECEIPT_SUFFIX)
        if name not in (TASK_CATALOG, BASE_MODEL_DIR, BASE_MODEL_REPORT):
            continue
        source = reference.path(name)
        if source.is_dir():
            store.put_dir(name, lambda folder, source=source: shutil.copytree(source, folder, dirs_exist_ok=True))
        else:
            store.put_bytes(name, reference.get_bytes(name))
    for task in KEYS[:keep]:  # each kept shard with its key (what made it)
        for name in (key_file(BANK, task), shard_file(BANK, task)):
            store.put_bytes(name, reference.get_bytes(name))
    return store


HARVEST = """
import dagster as dg, sys
sys.path.insert(0, "tests")
from conftest import smoke_resources
from apsft_dagster.experiment.assets.trace_bank import trace_bank
from apsft_dagster.experiment.partitions import train_task_partitions
from apsft_dagster.run_tags import single_run_tags
keys = train_task_partitions.get_partition_keys()
dg.materialize([trace_bank], resources=smoke_resources(sys.argv[1]), tags=single_run_tags(keys))
"""


@pytest.mark.slow
def test_smoke_stage_in_the_bucket_resumes_after_a_kill_and_refuses_a_tampered_object(s3, smoke_run, tmp_path):
    client, _ = s3
    _, reference = smoke_run
    url = f"s3://{BUCKET}/smoke"
    kept = len(KEYS) - 6  # six tasks to harvest: the kill lands after two of them
    _bucket_without_bank(reference, url, keep=kept)
    receipts = lambda: [k for k in _keys(client, f"smoke/{BANK}/shards/") if k.endswith(RECEIPT_SUFFIX)]  # noqa: E731
    proc = subprocess.Popen([sys.executable, "-c", HARVEST, url], cwd=PROJECT_ROOT,
                            env={**os.environ, "APSFT_PROFILE": "smoke"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(receipts()) < kept + 2:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = receipts()
    assert kept + 2 <= len(done) < len(KEYS), "the kill must land mid-harvest"
    before = {k: client.head_object(Bucket=BUCKET, Key=k)["ETag"] for k in done}

    result = dg.materialize([trace_bank], resources=smoke_resources(url), tags=single_run_tags(KEYS))  # the resume
    meta = result.get_asset_materialization_events()[0].materialization.metadata
    assert (meta["kept"].value, meta["generated"].value) == (len(done), len(KEYS) - len(done))
    assert {k: client.head_object(Bucket=BUCKET, Key=k)["ETag"] for k in done} == before  # not rewritten
    fresh = ObjectStore(url, mirror=tmp_path / "fresh_mirror")  # read back from the bucket alone
    assert {t: fresh.get_bytes(shard_file(BANK, t)) for t in KEYS} == {
        t: reference.get_bytes(shard_file(BANK, t)) for t in KEYS}

    checked = dg.materialize([trace_bank_index], resources=smoke_resources(url))
    assert all(e.passed for e in checked.get_asset_check_evaluations())

    # the SQL audits' views read the bucket's shards through a mirror filled on demand
    from apsft_dagster.core.audits import connect

    con = connect(ObjectStore(url, mirror=tmp_path / "audit_mirror"), ("trace_bank",))
    traces = sum(reference.get_parquet(shard_file(BANK, t)).height for t in KEYS)
    assert con.execute("select count(*) from trace_bank").fetchone()[0] == traces
    con.close()

    # an exported bank imports from the bucket byte for byte into another store
    exported = tmp_path / "exported"
    digest = export_bank(fresh, BANK, KEYS[:3], exported)
    target = ObjectStore(f"s3://{BUCKET}/imported")
    bank = InheritedBank(exported / "index.json", digest)
    for task in KEYS[:3]:
        bank.import_into(target, BANK, task)
        assert target.get_bytes(shard_file(BANK, task)) == reference.get_bytes(shard_file(BANK, task))

    # a tampered object is refused by name: the check names the task, verify names the object
    key = f"smoke/{shard_file(BANK, KEYS[3])}"
    body = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    client.put_object(Bucket=BUCKET, Key=key, Body=body[:-1] + b"\0")
    with pytest.raises(HashMismatchError, match=f"s3://{BUCKET}/{key}: SHA-256"):
        fresh.verify(shard_file(BANK, KEYS[3]))
    tampered = dg.materialize([trace_bank_index], resources=smoke_resources(url), raise_on_error=False)
    checks = {e.check_name: e for e in tampered.get_asset_check_evaluations()}
    assert not checks["hash_parity"].passed
    assert KEYS[3] in checks["hash_parity"].metadata["first_problems"].value
