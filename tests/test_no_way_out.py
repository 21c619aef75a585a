"""No way out of the store: each attack is tried and refused before anything is read or written."""

import json
import os

import pytest

from apsft_dagster.core.errors import StorePathError
from apsft_dagster.core.store import Store

ESCAPES = ["../x", "a/../../x", "/tmp/apsft-escape", "", "a/./../../x", "shards/../../../etc/passwd"]


@pytest.mark.parametrize("name", ESCAPES)
def test_names_that_climb_out_or_are_absolute_are_refused(tmp_path, name):
    store = Store(tmp_path / "store")
    for attempt in (lambda: store.put_bytes(name, b"x"), lambda: store.put_json(name, {}),
                    lambda: store.get_bytes(name), lambda: store.exists(name), lambda: store.remove(name),
                    lambda: store.put_dir(name, lambda folder: None)):
        with pytest.raises(StorePathError, match="refused"):
            attempt()
    assert not (tmp_path / "x").exists() and not os.path.exists("/tmp/apsft-escape")
    assert not any((tmp_path / "store").rglob("*")) if (tmp_path / "store").exists() else True


def test_a_symlink_pointing_outside_is_refused_one_inside_is_fine(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    store = Store(tmp_path / "store")
    store.root.mkdir()
    (store.root / "link").symlink_to(outside)
    with pytest.raises(StorePathError, match="outside"):
        store.put_bytes("link/stolen.json", b"{}")
    with pytest.raises(StorePathError, match="outside"):
        store.exists("link/stolen.json")
    assert list(outside.iterdir()) == []
    (store.root / "real").mkdir()
    (store.root / "inner").symlink_to(store.root / "real")
    store.put_bytes("inner/ok.json", b"{}")  # a link that stays inside the root is an ordinary folder
    assert (store.root / "real" / "ok.json").read_bytes() == b"{}"


def test_an_inherited_index_pointing_a_shard_outside_its_folder_is_refused_before_import(tmp_path):
    from apsft_dagster.core.bank import InheritedBank
    from apsft_dagster.core.store import sha256_bytes

    secret = tmp_path / "secret.parquet"
    secret.write_bytes(b"not yours")
    bank = tmp_path / "bank"
    bank.mkdir()
    index = bank / "index.json"
    entry = {"shard": "../secret.parquet", "sha256": sha256_bytes(b"not yours")}
    index.write_text(json.dumps({"format": "apsft-bank-index/1", "bank": "trace_bank",
                                 "tasks": {"caravan-L1-000": entry}}))
    digest = sha256_bytes(index.read_bytes())
    with pytest.raises(StorePathError, match="task caravan-L1-000's shard '../secret.parquet'"):
        InheritedBank(index, digest)


def test_partition_keys_by_hand_must_be_defined(tmp_path, capsys):
    from apsft_dagster.cli import main

    code = main(["run", "--store", str(tmp_path / "store"), "--from", "adapters_job", "--to", "adapters_job",
                 "--partitions", "adapters_job=../../escape"])
    assert code == 2 and "'../../escape' is not a partition" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()


def test_dataset_and_run_names_are_checked_before_any_path_is_made(tmp_path):
    from apsft_dagster.core.loss_mask.datasets import register as register_dataset
    from apsft_dagster.core.loss_mask.rules import LossMaskError
    from apsft_dagster.core.run_report.ingest import RunReportError
    from apsft_dagster.core.run_report.registry import register as register_run

    store = Store(tmp_path / "store")
    data = tmp_path / "d.jsonl"
    data.write_text("{}\n")
    for bad in ("../x", "a/b", "..", ".hidden", "x" * 65):
        with pytest.raises(LossMaskError, match="dataset name"):
            register_dataset(store, bad, data)
        with pytest.raises(RunReportError, match="run name"):
            register_run(store, bad, tmp_path)
    assert not store.root.exists()


def test_the_webhook_takes_only_http_urls_and_never_records_credentials(tmp_path):
    import http.server
    import threading

    from apsft_dagster.core.alerts import deliver

    line = deliver({"kind": "x"}, tmp_path / "a.jsonl", url="file:///etc/passwd")
    assert "only http:// or https://" in line["webhook"]["error"]

    seen = {}

    class Quiet(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            seen["auth"] = self.headers.get("Authorization")
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.handle_request, daemon=True).start()
    url = f"http://alice:s3cret@127.0.0.1:{server.server_port}/hook"
    line = deliver({"kind": "x"}, tmp_path / "a.jsonl", url=url)
    server.server_close()
    assert line["webhook"]["status"] == 204
    assert line["webhook"]["url"] == f"http://***@127.0.0.1:{server.server_port}/hook"
    assert seen["auth"] == "Basic " + __import__("base64").b64encode(b"alice:s3cret").decode()
    written = (tmp_path / "a.jsonl").read_text()
    assert "s3cret" not in written and "alice" not in written and "file:///etc/passwd" in written
