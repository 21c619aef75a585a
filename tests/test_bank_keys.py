"""Evidence keyed by what made it (issue 58): each bank shard's key, and a rerun under other settings refused.

The hand-made store here holds two tasks' trace and score shards, keyed as a run keys them; the
settings each test changes are named by hand, never read back from the code under test.
"""

from __future__ import annotations

import hashlib
import json

import polars as pl
import pytest
import yaml

from apsft_dagster.core.amendments import record_amendment
from apsft_dagster.core.bank import export_bank, write_index
from apsft_dagster.core.bank_key_check import RECOMPUTE_ENV, Keyer, check_bank, covers, preflight, store_changes
from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import AmendmentError, KeyMismatchError
from apsft_dagster.core.layout import (
    BASE_MODEL_REPORT,
    DESIGN_ANCHOR,
    SCORE_BANK,
    TASK_CATALOG,
    TRACE_BANK,
    key_file,
    shard_file,
)
from apsft_dagster.core.paths import CONFIG_DIR, PROJECT_ROOT
from apsft_dagster.core.store import Store

TASKS = pl.DataFrame({"task_id": ["caravan-L1-000", "caravan-L1-001"], "prompt": ["p0", "p1"], "answer": ["a0", "a1"]})


def _config(tmp_path, name: str = "variant", **edits):
    """smoke with `edits` ({"section.field": value}) applied."""
    raw = yaml.safe_load((CONFIG_DIR / "smoke.yaml").read_text())
    for dotted, value in edits.items():
        *parents, leaf = dotted.split(".")
        node = raw
        for part in parents:
            node = node[part]
        node[leaf] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path=path)


def _keyed_store(root, banks=(TRACE_BANK, SCORE_BANK), before=lambda store: None) -> Store:
    """Two tasks' shards of `banks`, keyed under smoke's settings (as the bank assets key them); `before(store)`
    runs once the catalog and the model are there, before any shard."""
    store = Store(root)
    store.put_parquet(TASK_CATALOG, TASKS)
    store.put_json(BASE_MODEL_REPORT, {"fingerprint": "f" * 64})
    before(store)
    config = load_config("smoke")
    for bank in banks:
        keyer = Keyer(store, config, bank)
        for task in TASKS.iter_rows(named=True):
            keyer.write(task)
            store.put_parquet(shard_file(bank, task["task_id"]), pl.DataFrame({"task_id": [task["task_id"]],
                                                                                 "bank": [bank]}))
    return store


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.delenv(RECOMPUTE_ENV, raising=False)
    return _keyed_store(tmp_path / "store")


def test_a_key_records_the_fields_model_code_and_seed_that_feed_its_bank(store):
    key = json.loads(store.get_bytes(key_file(SCORE_BANK, "caravan-L1-001")))
    settings, task = key["settings"], key["task"]
    assert settings["fields"]["harvest.sampling.temperature"] == 1.0 and settings["fields"]["scoring.instrument"] \
        == "reference"
    unfed = ("stage_b.", "selection.", "training.", "tasks.", "report")
    assert not any(f.startswith(unfed) for f in settings["fields"])
    assert settings["model_fingerprint"] == "f" * 64 and settings["seed"] == 42
    scoring = (PROJECT_ROOT / "apsft_dagster/core/scoring.py").read_bytes()
    assert settings["code"]["core/scoring.py"] == hashlib.sha256(scoring).hexdigest()
    trace_shard = store.path(shard_file(TRACE_BANK, "caravan-L1-001")).read_bytes()
    assert task == {"task_id": "caravan-L1-001", "inputs": {TRACE_BANK: hashlib.sha256(trace_shard).hexdigest()},
                    "task_sha256": hashlib.sha256(b'{\n "answer": "a1",\n "prompt": "p1"\n}\n').hexdigest()}


def test_an_edited_sampling_temperature_is_refused_naming_the_field_and_the_ways_out(store, tmp_path):
    edited = _config(tmp_path, **{"harvest.sampling.temperature": 0.7})
    before = sorted(p.name for p in store.root.rglob("*"))
    refused, _ = preflight(store, edited, recompute=False)
    assert "harvest.sampling.temperature 1.0 → 0.7: trace_bank 2 shards (e.g. caravan-L1-000), score_bank 2 " \
           "shards (e.g. caravan-L1-000)" in refused
    assert "`--store DIR`" in refused and "`apsft run --recompute`" in refused and "`apsft amend" in refused
    with pytest.raises(KeyMismatchError, match=r"harvest\.sampling\.temperature 1\.0 → 0\.7"):
        check_bank(Keyer(store, edited, TRACE_BANK), TASKS)
    assert sorted(p.name for p in store.root.rglob("*")) == before  # nothing written


def test_recompute_remakes_exactly_the_shards_made_under_other_settings(store, tmp_path, monkeypatch):
    edited = _config(tmp_path, **{"harvest.sampling.temperature": 0.7})
    refused, remade = preflight(store, edited, recompute=True)
    assert refused is None and remade[0].startswith("trace_bank: remaking 2 shards made under other settings")
    monkeypatch.setenv(RECOMPUTE_ENV, "1")
    assert check_bank(Keyer(store, edited, TRACE_BANK), TASKS) == dict.fromkeys(TASKS["task_id"], "recompute")


def test_a_field_that_feeds_no_bank_keeps_every_shard(store, tmp_path):
    edited = _config(tmp_path, **{"stage_b.min_gain": 0.09, "tasks.core_iid.per_cell": 5, "tasks.core_iid.total": 45})
    assert store_changes(store, edited) == {}
    assert check_bank(Keyer(store, edited, SCORE_BANK), TASKS) == dict.fromkeys(TASKS["task_id"], "keep")


def test_a_remade_upstream_shard_makes_the_downstream_shard_stale(store):
    store.put_parquet(shard_file(TRACE_BANK, "caravan-L1-000"), pl.DataFrame({"task_id": ["caravan-L1-000"],
                                                                               "bank": ["remade"]}))
    decisions = check_bank(Keyer(store, load_config("smoke"), SCORE_BANK), TASKS)
    assert decisions == {"caravan-L1-000": "stale", "caravan-L1-001": "keep"}


def test_a_hand_edited_key_is_refused_by_name(store):
    path = store.path(key_file(TRACE_BANK, "caravan-L1-001"))
    path.write_text(path.read_text().replace('temperature": 1.0', 'temperature": 0.7'))
    with pytest.raises(KeyMismatchError, match=r"(?s)trace_bank/keys/caravan-L1-001\.json: SHA-256 .* never by hand"):
        check_bank(Keyer(store, load_config("smoke"), TRACE_BANK), TASKS)
    with pytest.raises(Exception, match=r"caravan-L1-001\.json"):  # the index names it too, writing nothing
        write_index(store, TRACE_BANK, {t: store.verify(shard_file(TRACE_BANK, t)) for t in TASKS["task_id"]})
    assert not store.exists(f"{TRACE_BANK}/index.json")


def test_a_shard_without_a_key_is_never_kept_silently(store):
    store.remove(key_file(TRACE_BANK, "caravan-L1-000"))
    with pytest.raises(KeyMismatchError, match="made before shard keys were recorded"):
        check_bank(Keyer(store, load_config("smoke"), TRACE_BANK), TASKS)


def test_an_amendment_covers_only_a_field_that_decides_no_byte(store, tmp_path):
    edited = _config(tmp_path, **{"harvest.min_eligible": 3, "harvest.sampling.temperature": 0.7})
    log = store.path("amendments.jsonl")
    with pytest.raises(AmendmentError, match=r"--covers harvest\.sampling\.temperature: it decides the bytes"):
        covers(store, edited, ["harvest.sampling.temperature"])
    with pytest.raises(AmendmentError, match=r"--covers scoring\.parity_threshold: no shard .* nothing to cover"):
        covers(store, edited, ["scoring.parity_threshold"])
    assert not log.exists()
    only_threshold = _config(tmp_path, "threshold", **{"harvest.min_eligible": 3})
    covered = covers(store, only_threshold, ["harvest.min_eligible"])
    assert covered == {"harvest.min_eligible": {"from": 2, "to": 3}}
    record_amendment(store, "min_eligible 2 -> 3: an index check's threshold, no shard's bytes", covers=covered)
    assert store_changes(store, only_threshold) == {}  # covered: the shards are kept under their own key
    assert check_bank(Keyer(store, only_threshold, TRACE_BANK), TASKS) == dict.fromkeys(TASKS["task_id"], "keep")


def test_after_the_design_anchor_an_amendment_may_not_relax_a_frozen_threshold(tmp_path):
    from apsft_dagster.core.freeze import freeze

    store = _keyed_store(tmp_path / "store", (TRACE_BANK,),
                         lambda s: freeze(s, load_config("smoke"), "the design before the harvest"))
    assert store.exists(DESIGN_ANCHOR)
    edited = _config(tmp_path, **{"harvest.min_eligible": 3})
    with pytest.raises(AmendmentError, match=r"harvest\.min_eligible: frozen by the design anchor"):
        covers(store, edited, ["harvest.min_eligible"])
    assert not store.exists("amendments.jsonl")


def test_an_exported_bank_carries_its_keys_and_an_import_keeps_them(store, tmp_path):
    digest = export_bank(store, TRACE_BANK, list(TASKS["task_id"]), tmp_path / "export")
    index = json.loads((tmp_path / "export" / "index.json").read_bytes())
    key = (tmp_path / "export" / "keys" / "caravan-L1-000.json").read_bytes()
    assert index["tasks"]["caravan-L1-000"]["key_sha256"] == hashlib.sha256(key).hexdigest()
    inheriting = _config(tmp_path, **{"harvest.inherited_index": str(tmp_path / "export" / "index.json"),
                                      "harvest.inherited_index_sha256": digest})
    child = Store(tmp_path / "child")
    child.put_parquet(TASK_CATALOG, TASKS)
    child.put_json(BASE_MODEL_REPORT, {"fingerprint": "e" * 64})  # another model: the parent's key still holds
    keyer = Keyer(child, inheriting, TRACE_BANK)
    keyer.write(TASKS.row(0, named=True))
    imported = json.loads(child.get_bytes(key_file(TRACE_BANK, "caravan-L1-000")))
    assert imported["settings"] == {"inherited_index_sha256": digest} and imported["made_by"] == json.loads(key)


def test_after_the_anchor_apsft_amend_refuses_a_relaxed_gate_threshold_by_name(tmp_path, capsys):
    from apsft_dagster.cli import main
    from apsft_dagster.core.freeze import freeze

    store = Store(tmp_path / "store")
    freeze(store, load_config("smoke"), "the design before the harvest")
    relaxed = _config(tmp_path, **{"scoring.parity_threshold": 0.5})
    before = sorted(p.name for p in store.root.rglob("*"))
    code = main(["amend", "the gate failed; relax it", "--config", str(tmp_path / "variant.yaml"),
                 "--store", str(store.root)])
    assert code != 0 and relaxed.scoring.parity_threshold == 0.5
    assert "scoring.parity_threshold: 0.15 -> 0.5" in capsys.readouterr().err
    assert sorted(p.name for p in store.root.rglob("*")) == before  # nothing recorded
