"""Evidence seal and amendments: classification, validation, idempotence, fail-closed selection."""

import json
import shutil

import dagster as dg
import polars as pl
import pytest

from apsft_dagster.core import amendments
from apsft_dagster.core.bank import bank_index
from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import AmendmentError, SealError
from apsft_dagster.core.layout import AMENDMENT_LOG, EVIDENCE_SEAL, R1_BANK, SCORE_BANK, shard_file
from apsft_dagster.core.seal import code_digests, seal, validate_bank, verify_seal
from apsft_dagster.core.store import Store, sha256_file
from conftest import smoke_resources, variant_config


@pytest.fixture
def sealed_copy(smoke_run, tmp_path):
    """A private copy of the sealed smoke store, free to tamper with."""
    _, store = smoke_run
    shutil.copytree(store.root, tmp_path / "store")
    return Store(tmp_path / "store")


def test_amendment_class_follows_the_evidence_present_when_recorded(tmp_path):
    store = Store(tmp_path)
    first = amendments.record_amendment(store, "pre-register top_k 12", date="2026-11-01")
    store.put_bytes("trace_bank/shards/a.parquet", b"raw")
    second = amendments.record_amendment(store, "raise the allowance", date="2026-11-02")
    store.put_bytes(shard_file(SCORE_BANK, "a"), b"scores")
    third = amendments.record_amendment(store, "drop one family", date="2026-11-03")
    store.put_bytes(shard_file(R1_BANK, "a"), b"labels")
    fourth = amendments.record_amendment(store, "new parse rule")
    store.put_json("stage_a_eval/results.json", {})
    fifth = amendments.record_amendment(store, "change the primary metric")
    assert [r["classification"] for r in (first, second, third, fourth, fifth)] == [
        "prospective amendment", "prospective amendment", "post-score deviation", "post-rollout deviation",
        "post-outcome deviation"]
    assert first["evidence"] == {} and second["evidence"] == {"trace_bank": 1}
    assert fifth["evidence"] == {"trace_bank": 1, "score_bank": 1, "r1_labels": 1, "stage_a_eval": 1}
    logged = amendments.classified(store)
    assert [r["text"] for r in logged] == ["pre-register top_k 12", "raise the allowance", "drop one family",
                                           "new parse rule", "change the primary metric"]
    assert logged[2]["classification"] == "post-score deviation"  # derived again from the log, not stored
    assert "classification" not in store.get_bytes(AMENDMENT_LOG).decode()


def test_an_edited_amendment_breaks_the_chain(tmp_path):
    store = Store(tmp_path)
    for text in ("one", "two", "three"):
        amendments.record_amendment(store, text, date="2026-11-01")
    lines = store.get_bytes(AMENDMENT_LOG).splitlines(keepends=True)
    edited = json.loads(lines[0])
    edited["evidence"] = {}
    edited["text"] = "one (softened)"
    store.put_bytes(AMENDMENT_LOG, json.dumps(edited, sort_keys=True).encode() + b"\n" + b"".join(lines[1:]))
    with pytest.raises(AmendmentError, match="line 2: chain broken"):
        amendments.read_log(store)
    with pytest.raises(AmendmentError, match="YYYY-MM-DD"):
        amendments.record_amendment(Store(tmp_path / "other"), "x", date="30/11/2026")


def test_a_sealed_store_copied_elsewhere_still_verifies(smoke_run, tmp_path):
    _, store = smoke_run
    moved = Store(tmp_path / "another" / "place")
    shutil.copytree(store.root, moved.root)
    assert verify_seal(moved, load_config("smoke")) == json.loads(store.get_bytes(EVIDENCE_SEAL))
    assert str(store.root) not in moved.get_bytes(EVIDENCE_SEAL).decode()  # nothing in it names a location


def test_smoke_seal_binds_banks_config_model_and_code(smoke_run):
    results, store = smoke_run
    assert results["evidence_seal"].success
    doc = json.loads(store.get_bytes(EVIDENCE_SEAL))
    config = load_config("smoke")
    assert doc["config_digest"] == config.digest
    assert doc["base_model_fingerprint"] == store.verify("base_model")
    for bank in ("trace_bank", "score_bank", "r1_labels"):
        assert doc["banks"][bank]["index_sha256"] == store.verify(f"{bank}/index.json")
    trace = pl.concat([store.get_parquet(shard_file("trace_bank", t))
                       for t in store.get_json("trace_bank/index.json")["tasks"]])
    assert doc["traces"] == trace.height and doc["eligible"] == trace["eligible"].sum()
    assert {"apsft_dagster/core/selection/rules.py", "apsft_dagster/core/selection/sft_arms.py"} <= doc["code"].keys()
    assert doc["code"] == code_digests()


def test_sealing_twice_is_byte_idempotent(sealed_copy):
    config = load_config("smoke")
    before = sealed_copy.path(EVIDENCE_SEAL).read_bytes()
    _, digest = seal(sealed_copy, config)
    assert sealed_copy.path(EVIDENCE_SEAL).read_bytes() == before
    assert digest == sha256_file(sealed_copy.path(EVIDENCE_SEAL))


def test_tampered_score_shard_makes_selection_refuse_naming_it(sealed_copy):
    from apsft_dagster.experiment.assets.sft_arms import sft_arms
    from apsft_dagster.experiment.partitions import arm_partitions
    from apsft_dagster.run_tags import single_run_tags

    config = load_config("smoke")
    task = sorted(sealed_copy.get_json(f"{SCORE_BANK}/index.json")["tasks"])[3]
    path = sealed_copy.path(shard_file(SCORE_BANK, task))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(SealError, match=f"score_bank/shards/{task}.parquet"):
        verify_seal(sealed_copy, config)
    result = dg.materialize([sft_arms], resources=smoke_resources(sealed_copy.root), raise_on_error=False,
                            tags=single_run_tags(arm_partitions.get_partition_keys()))
    assert not result.success
    assert f"{task}.parquet" in str(result.get_step_failure_events()[0].step_failure_data.error.cause.message)
    # the receipt forged to match still leaves the sealed index disagreeing
    receipt = json.loads(sealed_copy.receipt_path(shard_file(SCORE_BANK, task)).read_text())
    receipt["sha256"] = sha256_file(path)
    sealed_copy.receipt_path(shard_file(SCORE_BANK, task)).write_text(json.dumps(receipt))
    with pytest.raises(SealError, match=f"{task}.parquet: SHA-256 {receipt['sha256']}, sealed"):
        verify_seal(sealed_copy, config)
    problems, _ = validate_bank(sealed_copy, config)
    assert any(task in p and "differs from score_bank/index.json" in p for p in problems)


def test_config_change_and_late_amendment_are_named(sealed_copy, tmp_path):
    verify_seal(sealed_copy, load_config("smoke"))  # untouched copy verifies
    changed = load_config(path=variant_config(tmp_path, lambda raw: raw["selection"].update(band=0.3)))
    with pytest.raises(SealError, match="config digest is"):
        verify_seal(sealed_copy, changed)
    record = amendments.record_amendment(sealed_copy, "band 0.25 -> 0.30 after seeing the outcomes")
    assert record["classification"] == "post-outcome deviation"  # the smoke store holds Stage A results
    with pytest.raises(SealError, match="an amendment was recorded after sealing"):
        verify_seal(sealed_copy, load_config("smoke"))
    doc, _ = seal(sealed_copy, load_config("smoke"))  # resealing shows it, classified
    assert doc["amendments"]["records"][0]["classification"] == "post-outcome deviation"
    verify_seal(sealed_copy, load_config("smoke"))


def test_validation_finds_a_broken_join_and_stray_rows(sealed_copy):
    """A hand-made break with consistent hashes: one R1 row removed, one score row moved to another task."""
    config = load_config("smoke")
    index = sealed_copy.get_json(f"{R1_BANK}/index.json")["tasks"]
    task = sorted(index)[0]
    labels = sealed_copy.get_parquet(shard_file(R1_BANK, task)).sort("trace_id")
    dropped = labels["trace_id"][0]
    digests = {t: e["sha256"] for t, e in index.items()}
    digests[task] = sealed_copy.put_parquet(shard_file(R1_BANK, task), labels.slice(1))
    sealed_copy.put_json(f"{R1_BANK}/index.json", bank_index(R1_BANK, digests))
    problems, _ = validate_bank(sealed_copy, config)
    assert f"r1_labels: trace {dropped} is missing (present in score_bank)" in problems
    score_index = sealed_copy.get_json(f"{SCORE_BANK}/index.json")["tasks"]
    other = sorted(score_index)[1]
    scores = sealed_copy.get_parquet(shard_file(SCORE_BANK, other))
    moved = scores.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit(task)).otherwise("task_id").alias("task_id"))
    digests = {t: e["sha256"] for t, e in score_index.items()}
    digests[other] = sealed_copy.put_parquet(shard_file(SCORE_BANK, other), moved)
    sealed_copy.put_json(f"{SCORE_BANK}/index.json", bank_index(SCORE_BANK, digests))
    problems, _ = validate_bank(sealed_copy, config)
    assert any(p.endswith(f"1 rows belong to another task than {other}") for p in problems)
    with pytest.raises(SealError, match="nothing was sealed"):
        seal(sealed_copy, config)
