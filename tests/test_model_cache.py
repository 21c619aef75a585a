"""The content-addressed embedded model: deterministic builds, hits, misses, keys, tampering."""

import json
import os
import subprocess
import sys

import pytest

from apsft_dagster.core.config import load_config
from apsft_dagster.core.embedded.build import build_embedded
from apsft_dagster.core.embedded.cache import ENTRY, cache_key, embedded_model
from apsft_dagster.core.layout import BASE_MODEL_DIR, BASE_MODEL_REPORT, TASK_CATALOG
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.store import dir_digests, fingerprint
from conftest import variant_config

PROMPTS = ["a prompt of the catalog", "another one"]


def _small(raw: dict) -> None:
    """The embedded recipe shrunk to seconds: same code path, fewer steps and checks."""
    raw["embedded"].update(train_steps=4, pretrain_tasks_per_cell=2, capability_tasks=2, capability_samples=1,
                           capability_allowance=8, batch_size=4)


@pytest.fixture
def small(tmp_path):
    return load_config(path=variant_config(tmp_path, _small))


BUILD = """
import json, sys
from pathlib import Path
from apsft_dagster.core.config import load_config
from apsft_dagster.core.embedded.build import build_embedded
from apsft_dagster.core.store import dir_digests, fingerprint
out = Path(sys.argv[2]); out.mkdir()
build_embedded(load_config(path=sys.argv[1]), json.loads(sys.argv[3]), out, lambda m: None)
print(fingerprint(dir_digests(out)))
"""


@pytest.mark.slow
def test_build_is_identical_in_process_and_in_a_fresh_process(small, tmp_path):
    here = tmp_path / "here"
    here.mkdir()
    build_embedded(small, PROMPTS, here, lambda m: None)
    proc = subprocess.run([sys.executable, "-c", BUILD, str(tmp_path / "variant.yaml"), str(tmp_path / "there"),
                           json.dumps(PROMPTS)], capture_output=True, text=True, cwd=PROJECT_ROOT, check=True,
                          env={**os.environ, "APSFT_MODEL_CACHE": "off", "PYTHONHASHSEED": "12345"})
    assert proc.stdout.split()[-1] == fingerprint(dir_digests(here))
    assert {"model.safetensors", "tokenizer.json", "config.json"} <= set(dir_digests(here))


def test_miss_then_hit_give_the_same_files(small, tmp_path, monkeypatch):
    monkeypatch.setenv("APSFT_MODEL_CACHE", str(tmp_path / "cache"))
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    built = embedded_model(small, PROMPTS, first, lambda m: None)
    reused = embedded_model(small, PROMPTS, second, lambda m: None)
    assert (built["cache"], reused["cache"]) == ("miss", "hit")
    assert built["cache_key"] == reused["cache_key"] == cache_key(small, PROMPTS)
    assert dir_digests(first) == dir_digests(second)
    assert {k: v for k, v in built.items() if k != "cache"} == {k: v for k, v in reused.items() if k != "cache"}
    assert not list((tmp_path / "cache").glob(".*tmp-*"))  # no half-built entry left


def test_a_tampered_entry_is_rebuilt_not_served(small, tmp_path, monkeypatch):
    monkeypatch.setenv("APSFT_MODEL_CACHE", str(tmp_path / "cache"))
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    report = embedded_model(small, PROMPTS, tmp_path / "a", lambda m: None)
    weights = tmp_path / "cache" / report["cache_key"] / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    again = embedded_model(small, PROMPTS, tmp_path / "b", lambda m: None)
    assert again["cache"] == "miss"
    assert dir_digests(tmp_path / "a") == dir_digests(tmp_path / "b")


def test_the_key_moves_with_what_determines_the_bytes(small, tmp_path):
    (tmp_path / "x").mkdir()
    longer = load_config(path=variant_config(tmp_path / "x", lambda raw: (_small(raw), raw["embedded"].update(
        train_steps=5))))
    reseeded = small.model_copy(update={"seeds": small.seeds.model_copy(update={"experiment": 7})})
    unrelated = small.model_copy(update={"selection": small.selection.model_copy(update={"top_k": 3})})
    key = cache_key(small, PROMPTS)
    assert len({key, cache_key(longer, PROMPTS), cache_key(reseeded, PROMPTS), cache_key(small, PROMPTS[:1])}) == 4
    assert cache_key(unrelated, PROMPTS) == key  # selection does not touch the model


def test_smoke_base_model_records_the_cache_and_keeps_relative_paths_and_modes(smoke_run):
    results, store = smoke_run
    meta = results["base_model"].get_asset_materialization_events()[0].materialization.metadata
    prompts = store.get_parquet(TASK_CATALOG)["prompt"].to_list()
    assert meta["cache"].value in ("hit", "shipped", "miss")
    assert meta["cache_key"].value == cache_key(load_config("smoke"), prompts)
    report = store.get_json(BASE_MODEL_REPORT)
    assert report["path"] == BASE_MODEL_DIR and "cache" not in report  # how it was obtained is not what it is
    modes = {p.name: p.stat().st_mode & 0o777 for p in store.path(BASE_MODEL_DIR).iterdir()}
    assert set(modes.values()) == {0o644}, modes
    assert ENTRY not in modes


def test_the_shipped_models_are_the_profiles_current_builds(smoke_run):
    """apsft_dagster/models holds each shipped profile's model under its current key, every file as its
    entry records it, and the smoke run's model is byte for byte the shipped smoke entry."""
    from apsft_dagster.core.embedded.cache import profile_key
    from apsft_dagster.core.embedded.shipped import SHIPPED, SHIPPED_PROFILES, verify_shipped

    keys = {profile: profile_key(load_config(profile)) for profile in SHIPPED_PROFILES}
    assert sorted(p.name for p in SHIPPED.iterdir() if p.is_dir()) == sorted(set(keys.values())), (
        "a shipped model's cache key moved (build code, a profile's model sections or a library version "
        "changed): run `.venv/bin/python scripts/refresh_model_seed.py` and commit apsft_dagster/models")
    for key in keys.values():
        verify_shipped(SHIPPED / key)
    _, store = smoke_run
    shipped = {k: v for k, v in dir_digests(SHIPPED / keys["smoke"]).items() if k != ENTRY}
    assert dir_digests(store.path(BASE_MODEL_DIR)) == shipped


@pytest.fixture
def smoke_key():
    from apsft_dagster.core.embedded.cache import profile_key

    return profile_key(load_config("smoke"))


def test_an_empty_cache_takes_the_shipped_model_and_builds_nothing(tmp_path, monkeypatch, smoke_key):
    from apsft_dagster.core.embedded import build
    from apsft_dagster.core.embedded.shipped import SHIPPED
    from apsft_dagster.core.tasks.catalog import build_catalog

    config = load_config("smoke")
    monkeypatch.setenv("APSFT_MODEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "build_embedded", lambda *a, **k: pytest.fail("a shipped model was rebuilt"))
    (out := tmp_path / "out").mkdir()
    report = embedded_model(config, build_catalog(config)["prompt"].to_list(), out, lambda m: None)
    assert report["cache"] == "shipped" and report["cache_key"] == smoke_key
    shipped = {k: v for k, v in dir_digests(SHIPPED / smoke_key).items() if k != ENTRY}
    assert dir_digests(out) == shipped
    assert dir_digests(tmp_path / "cache" / smoke_key) == dir_digests(SHIPPED / smoke_key)  # cached for next time


@pytest.mark.parametrize("tamper", ["flip", "drop", "add"])
def test_a_tampered_shipped_entry_is_refused_by_name_and_nothing_is_written(tmp_path, monkeypatch, smoke_key, tamper):
    """One flipped byte of the weights, a missing file or an unlisted one: HashMismatchError naming the
    file, before anything reaches the cache or the model folder."""
    import shutil

    from apsft_dagster.core.embedded import shipped
    from apsft_dagster.core.errors import HashMismatchError
    from apsft_dagster.core.tasks.catalog import build_catalog

    root = tmp_path / "models"
    shutil.copytree(shipped.SHIPPED / smoke_key, root / smoke_key)
    weights = root / smoke_key / "model.safetensors"
    if tamper == "flip":
        data = bytearray(weights.read_bytes())
        data[len(data) // 2] ^= 0x01
        weights.write_bytes(bytes(data))
    elif tamper == "drop":
        weights.unlink()
    else:
        (root / smoke_key / "notes.txt").write_text("not part of the model")
    monkeypatch.setattr(shipped, "SHIPPED", root)
    monkeypatch.setenv("APSFT_MODEL_CACHE", str(tmp_path / "cache"))
    config = load_config("smoke")
    (out := tmp_path / "out").mkdir()
    name = "notes.txt" if tamper == "add" else "model.safetensors"
    with pytest.raises(HashMismatchError, match=rf"shipped model file \S+/{smoke_key}/{name} .*refused"):
        embedded_model(config, build_catalog(config)["prompt"].to_list(), out, lambda m: None)
    assert list(out.iterdir()) == []
    cache = tmp_path / "cache"
    assert not cache.exists() or list(cache.iterdir()) == []


def _entry(folder, weights: bytes):
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(weights)
    files = dir_digests(folder)
    (folder / ENTRY).write_text(json.dumps({"report": {}, "fingerprint": fingerprint(files), "files": files}))
    return folder


def test_an_entry_placed_meanwhile_by_another_process_stays_if_intact(tmp_path):
    """Two runs (or two test workers) missing the same key at once: the second to finish keeps the
    first one's intact entry (a reader may be copying from it) and drops its own temp folder; a
    broken entry in the way is replaced."""
    from apsft_dagster.core.embedded.shipped import place_entry

    target = _entry(tmp_path / "key", b"first")
    place_entry(_entry(tmp_path / ".key.tmp-2", b"second"), target)
    assert (target / "model.safetensors").read_bytes() == b"first" and not (tmp_path / ".key.tmp-2").exists()
    (target / "model.safetensors").write_bytes(b"broken")  # no longer its fingerprint
    place_entry(_entry(tmp_path / ".key.tmp-3", b"third"), target)
    assert (target / "model.safetensors").read_bytes() == b"third"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key"]  # nothing aside left behind
    place_entry(_entry(tmp_path / ".new.tmp-4", b"fourth"), tmp_path / "new")  # nothing there: a rename
    assert (tmp_path / "new" / "model.safetensors").read_bytes() == b"fourth"
