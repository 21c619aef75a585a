"""The design anchor (issue 58, item 5): `apsft freeze` records the design before the harvest, every later
receipt cites it, and a change of the config or the sealed code after it waits for an amendment."""

import hashlib
import json
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apsft_dagster.cli import main
from apsft_dagster.core import anchor as anchor_module
from apsft_dagster.core.amendments import record_amendment
from apsft_dagster.core.anchor import changes_since_anchor, code_now, design_now, read_anchor
from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import AnchorError, ApsftError
from apsft_dagster.core.freeze import freeze, require_amendment
from apsft_dagster.core.layout import DESIGN_ANCHOR, PARITY_GATE, TRACE_BANK, shard_file
from apsft_dagster.core.object_store import ObjectStore
from apsft_dagster.core.seal import SEALED_CODE, code_digests
from apsft_dagster.core.store import Store, sha256_bytes
from conftest import moto_s3, variant_config
from fuzzing import fuzz_settings, judge, mutated_bytes, mutated_document

SMOKE = load_config("smoke")
WHEN = "2026-12-01T09:30:00+00:00"


def _files(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _cooler(tmp_path):
    return load_config(path=variant_config(tmp_path, lambda raw: raw["harvest"]["sampling"].update(temperature=0.7)))


def test_freeze_records_the_digests_the_date_and_the_rationale(tmp_path):
    store = Store(tmp_path)
    doc = freeze(store, SMOKE, "  the seed's design, before the harvest  ", date="2026-12-01T10:30:00+01:00")
    code = code_digests()
    by_hand = hashlib.sha256(json.dumps(code, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert (doc["config_digest"], doc["code"], doc["code_digest"]) == (SMOKE.sealed_digest, code, by_hand)
    assert (doc["date"], doc["rationale"], doc["profile"]) == (WHEN, "the seed's design, before the harvest", "smoke")
    assert (doc["evidence"], doc["amendments"]) == ({}, 0)
    file_sha = hashlib.sha256((tmp_path / DESIGN_ANCHOR).read_bytes()).hexdigest()
    assert doc["sha256"] == file_sha and read_anchor(store) == doc
    assert hashlib.sha256(json.dumps(doc["config"], sort_keys=True, separators=(",", ":")).encode()).hexdigest() \
        == SMOKE.sealed_digest  # the body kept is the one the digest hashes
    assert code_now(list(SEALED_CODE)) == code  # the anchor's patterns find the seal's files


@pytest.mark.parametrize("rationale", ["", "   \n"])
def test_an_empty_rationale_is_refused_and_nothing_written(tmp_path, rationale):
    with pytest.raises(AnchorError, match="needs a rationale"):
        freeze(Store(tmp_path), SMOKE, rationale)
    assert _files(tmp_path) == {}


def test_a_second_freeze_is_refused_naming_the_anchor(tmp_path):
    store = Store(tmp_path)
    freeze(store, SMOKE, "first", date=WHEN)
    before = _files(tmp_path)
    with pytest.raises(AnchorError, match=rf"{DESIGN_ANCHOR}: .*already frozen on {re.escape(WHEN)}.*apsft amend"):
        freeze(Store(tmp_path), SMOKE, "second")
    assert _files(tmp_path) == before


def test_freeze_after_scores_is_refused_but_traces_alone_are_prospective(tmp_path):
    traced = Store(tmp_path / "traced")
    traced.put_bytes(shard_file(TRACE_BANK, "caravan-L1-000"), b"x")
    assert freeze(traced, SMOKE, "the rest of the harvest is still to come")["evidence"] == {TRACE_BANK: 1}
    scored = Store(tmp_path / "scored")
    scored.put_json(PARITY_GATE, {"passed": True})
    before = _files(scored.root)
    with pytest.raises(AnchorError, match=r"parity_gate.json 1: a post-score deviation store.*not be prospective"):
        freeze(scored, SMOKE, "too late")
    assert _files(scored.root) == before


def test_receipts_cite_the_anchor_only_after_it_and_read_it_once(tmp_path, monkeypatch):
    store = Store(tmp_path)
    store.put_bytes("before.txt", b"abc")
    today = {"artifact": "before.txt", "bytes": 3, "sha256": hashlib.sha256(b"abc").hexdigest()}
    assert (tmp_path / "before.txt.receipt.json").read_bytes() == (json.dumps(today, sort_keys=True, indent=1)
                                                                  + "\n").encode()  # today's bytes exactly
    doc = freeze(store, SMOKE, "why", date=WHEN)
    assert "anchor" not in json.loads((tmp_path / f"{DESIGN_ANCHOR}.receipt.json").read_text())
    store.put_bytes("after.txt", b"abc")  # the Store that froze cites it at once
    assert json.loads((tmp_path / "after.txt.receipt.json").read_text()) == {**today, "artifact": "after.txt",
                                                                             "anchor": doc["sha256"]}
    reads = []
    original = Store.receipt
    monkeypatch.setattr(Store, "receipt", lambda self, name: reads.append(name) or original(self, name))
    later = Store(tmp_path)
    for n in range(3):
        later.put_json(f"later{n}.json", {"n": n})
    assert reads.count(DESIGN_ANCHOR) == 1
    assert all(json.loads((tmp_path / f"later{n}.json.receipt.json").read_text())["anchor"] == doc["sha256"]
               for n in range(3))


def test_an_object_store_cites_the_buckets_anchor_and_keeps_its_mirror(tmp_path, monkeypatch):
    with moto_s3("anchor") as (client, endpoint):
        for name, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test",
                            "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}.items():
            monkeypatch.setenv(name, value)
        first = ObjectStore("s3://anchor/study", mirror=tmp_path / "m1")
        first.put_bytes("old.txt", b"old")
        doc = freeze(first, SMOKE, "why", date=WHEN)
        other = ObjectStore("s3://anchor/study", mirror=tmp_path / "m2")  # another machine: a bare mirror
        other.put_bytes("new.txt", b"new")
        receipt = json.loads(client.get_object(Bucket="anchor", Key="study/new.txt.receipt.json")["Body"].read())
        assert receipt["anchor"] == doc["sha256"]
        old = json.loads(client.get_object(Bucket="anchor", Key="study/old.txt.receipt.json")["Body"].read())
        assert "anchor" not in old
        other.path("old.txt")  # fetched once into the mirror ...
        fetched = []
        monkeypatch.setattr(other.mirror, "put_bytes", lambda *a: fetched.append(a))
        assert other.path("old.txt").read_bytes() == b"old" and other.path("new.txt").read_bytes() == b"new"
        assert fetched == []  # ... and not again: the anchor a receipt cites says nothing of the bytes


def test_changes_name_the_config_fields_and_each_sealed_code_file(tmp_path, monkeypatch):
    store = Store(tmp_path)
    assert changes_since_anchor(store, SMOKE) == []  # no anchor: nothing to compare
    doc = freeze(store, SMOKE, "why", date=WHEN)
    assert changes_since_anchor(store, SMOKE) == []
    cooler = _cooler(tmp_path)
    assert changes_since_anchor(store, cooler) == [
        f"config digest {SMOKE.sealed_digest[:12]} -> {cooler.sealed_digest[:12]}",
        "config harvest.sampling.temperature: 1.0 -> 0.7"]
    first, second, *_ = sorted(doc["code"])
    now = {**doc["code"], first: "f" * 64, "apsft_dagster/core/selection/new_rule.py": "e" * 64}
    del now[second]
    monkeypatch.setattr(anchor_module, "code_now", lambda patterns: now)
    assert changes_since_anchor(store, SMOKE) == [
        f"sealed code {first}: SHA-256 {doc['code'][first][:12]} -> ffffffffffff",
        f"sealed code {second}: removed", "sealed code apsft_dagster/core/selection/new_rule.py: added"]


def test_a_changed_design_waits_for_an_amendment_recorded_after_the_anchor(tmp_path):
    store = Store(tmp_path)
    record_amendment(store, "before the anchor: does not cover what follows it")
    freeze(store, SMOKE, "why", date=WHEN)
    assert require_amendment(store, SMOKE) == ([], [])
    cooler = _cooler(tmp_path)
    before = _files(tmp_path)
    with pytest.raises(AnchorError, match=r"(?s)harvest.sampling.temperature: 1.0 -> 0.7.*Nothing was run.*"
                                          r"apsft amend"):
        require_amendment(store, cooler)
    assert _files(tmp_path) == before
    record_amendment(store, "an amendment of the frozen design covers no other", design=design_now(store, SMOKE))
    with pytest.raises(AnchorError, match=r"none recorded after it covers this design"):
        require_amendment(store, cooler)
    record_amendment(store, "cooler sampling, decided before any score", design=design_now(store, cooler))
    changes, after = require_amendment(store, cooler)
    assert changes[1] == "config harvest.sampling.temperature: 1.0 -> 0.7"
    assert [r["seq"] for r in after] == [2, 3] and after[1]["design"] == {
        "config_digest": cooler.sealed_digest, "code_digest": read_anchor(store)["code_digest"]}


def test_an_edited_or_hand_made_anchor_is_refused_by_name(tmp_path):
    store = Store(tmp_path)
    freeze(store, SMOKE, "why", date=WHEN)
    (tmp_path / DESIGN_ANCHOR).write_bytes((tmp_path / DESIGN_ANCHOR).read_bytes().replace(b"why", b"how"))
    with pytest.raises(AnchorError, match="changed after it was frozen"):
        read_anchor(store)
    made = Store(tmp_path / "made")
    made.put_json(DESIGN_ANCHOR, {"format": "apsft-design-anchor/1", "profile": "smoke"})
    with pytest.raises(AnchorError, match=r"field 'config_digest'.*never by hand"):
        read_anchor(made)


def test_apsft_freeze_and_a_run_of_a_changed_design_refused_before_anything_is_written(tmp_path, capsys):
    store = tmp_path / "store"
    assert main(["freeze", "--store", str(store), "--rationale", "smoke, as registered"]) == 0
    assert "design anchor" in capsys.readouterr().out
    assert main(["freeze", "--store", str(store), "--rationale", "again"]) == 2
    assert "already frozen" in capsys.readouterr().err
    before = _files(store)
    edited = variant_config(tmp_path, lambda raw: raw["harvest"]["sampling"].update(temperature=0.7))
    assert main(["run", "--config", str(edited), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "harvest.sampling.temperature: 1.0 -> 0.7" in err and "apsft amend" in err
    assert _files(store) == before


@fuzz_settings()
@given(data=st.data())
def test_a_hand_edited_anchor_is_read_or_refused_by_name_and_writes_nothing(data):
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "store")
        doc = freeze(store, SMOKE, "why", date=WHEN)
        old = store.get_bytes(DESIGN_ANCHOR)
        how = data.draw(st.sampled_from(["bytes", "document", "stale_receipt"]))
        new = data.draw(mutated_bytes(old) if how == "bytes" else mutated_document(json.loads(old)))
        if how == "stale_receipt":
            store.path(DESIGN_ANCHOR).write_bytes(new)  # edited by hand, receipt not redone
        else:
            store.put_bytes(DESIGN_ANCHOR, new)  # edited by hand, with its receipt redone
        before = _files(Path(tmp))
        accepted = judge("design anchor", lambda: read_anchor(store), (ApsftError,), [DESIGN_ANCHOR])
        assert not (accepted and how == "stale_receipt" and new != old), "an edited anchor was accepted"
        if accepted:  # a well-formed anchor: its digest is what every later receipt cites
            assert read_anchor(store)["sha256"] == (doc["sha256"] if new == old else sha256_bytes(new))
        assert _files(Path(tmp)) == before
