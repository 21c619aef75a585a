"""One store, one profile, one instance (issue 58): where a store's Dagster instance lives, and the
store's record of its profile (core/store_owner.py), which `apsft run` checks before it writes."""

import hashlib
import os
import subprocess
import sys

import pytest

from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import HashMismatchError, StoreOwnerError
from apsft_dagster.core.paths import PROJECT_ROOT, dagster_home, ensure_dagster_home, store_instance
from apsft_dagster.core.store import Store
from apsft_dagster.core.store_owner import OWNER_FILE, adopt, refuse_another


def claim(store, config, location) -> str | None:
    """What `apsft run` does with the two (cli/experiment/run.py): refuse first, record once it runs."""
    return adopt(store, config, location) if refuse_another(store, config, location) else None


def _files(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_each_store_has_its_own_instance_named_readably(tmp_path):
    state = tmp_path / "state"
    assert store_instance(state / "store" / "smoke", state) == state / "instances" / "smoke"  # a profile's own store
    copy = tmp_path / "elsewhere" / "smoke"  # the same name elsewhere: not smoke's instance
    expected = hashlib.sha256(str(copy.resolve()).encode()).hexdigest()[:10]
    assert store_instance(copy, state) == state / "instances" / f"smoke-{expected}"
    assert store_instance(tmp_path / "a" / "x", state) != store_instance(tmp_path / "b" / "x", state)
    url = hashlib.sha256(b"s3://bucket/runs/full").hexdigest()[:10]
    assert store_instance("s3://bucket/runs/full/", state) == state / "instances" / f"full-{url}"
    odd = state / "store" / "my store"  # under <state>/store/ but not a readable name: hashed as well
    assert store_instance(odd, state).name.startswith("my_store-")


def test_a_dagster_home_the_user_set_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("APSFT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "team"))
    assert dagster_home(tmp_path / "state" / "store" / "smoke") == tmp_path / "team"
    monkeypatch.delenv("DAGSTER_HOME")
    assert dagster_home(tmp_path / "state" / "store" / "smoke") == tmp_path / "state" / "instances" / "smoke"


def test_a_new_instance_beside_the_shared_one_says_so_once(tmp_path, monkeypatch, capsys):
    state = tmp_path / "state"
    (state / "dagster_home").mkdir(parents=True)  # where every store's runs were recorded before
    monkeypatch.setenv("APSFT_STATE_DIR", str(state))
    monkeypatch.setenv("DAGSTER_HOME", "")  # recorded, so what ensure_dagster_home exports is undone
    monkeypatch.delenv("DAGSTER_HOME")
    home = ensure_dagster_home(state / "store" / "smoke")
    assert home == state / "instances" / "smoke" and os.environ["DAGSTER_HOME"] == str(home)
    assert "telemetry:\n  enabled: false" in (home / "dagster.yaml").read_text()
    note = capsys.readouterr().err
    assert note.count("\n") == 1 and str(home) in note and f"DAGSTER_HOME={state / 'dagster_home'}" in note
    monkeypatch.delenv("DAGSTER_HOME")
    ensure_dagster_home(state / "store" / "smoke")
    assert capsys.readouterr().err == ""  # the instance exists: nothing more to say


def test_the_first_run_records_the_profile_and_a_run_of_another_is_refused_with_nothing_written(tmp_path):
    store = Store(tmp_path / "store")
    smoke, laptop = load_config("smoke"), load_config("laptop")
    said = claim(store, smoke, "STORE")
    assert said == ("store STORE now belongs to profile smoke (its store.json); a run of another profile is "
                    "refused on it")
    assert store.get_json(OWNER_FILE) == {"profile": "smoke", "sealed_profile": "smoke"}
    before = _files(store.root)
    assert claim(store, smoke, "STORE") is None  # its own profile: nothing to say
    with pytest.raises(StoreOwnerError) as refused:
        refuse_another(store, laptop, "STORE")
    said = str(refused.value)
    assert said.startswith("store STORE belongs to profile smoke (recorded in its store.json on its first run); "
                           "this run's profile is laptop")
    assert "Nothing was written" in said and "--store NEW_FOLDER" in said and "leave out --store" in said
    assert _files(store.root) == before


def test_a_store_without_a_record_is_not_written_until_the_run_passes_its_checks(tmp_path):
    store = Store(tmp_path / "store")
    store.put_json("trace_bank/index.json", {"made": "before stores recorded their profile"})
    before = _files(store.root)
    assert refuse_another(store, load_config("laptop"), "S") is True and _files(store.root) == before
    adopt(store, load_config("laptop"), "S")  # it adopts the profile of its next run
    assert store.get_json(OWNER_FILE)["profile"] == "laptop"


def test_a_rehearsal_shares_its_registered_profiles_store(tmp_path):
    """A declared rehearsal's Stage A is the registered profile's (core/rehearsal.py): it may run on
    that profile's store (docs/experiment.md), and the profile on the rehearsal's; nothing else."""
    laptop, rehearsal, smoke = load_config("laptop"), load_config("laptop_rehearsal"), load_config("smoke")
    theirs, ours = Store(tmp_path / "laptop"), Store(tmp_path / "rehearsal")
    claim(theirs, laptop, "L")
    assert claim(theirs, rehearsal, "L") is None
    assert "laptop_rehearsal (a rehearsal of laptop)" in claim(ours, rehearsal, "R")
    assert ours.get_json(OWNER_FILE)["sealed_profile"] == "laptop"
    assert claim(ours, laptop, "R") is None
    with pytest.raises(StoreOwnerError, match="belongs to profile laptop_rehearsal \\(a rehearsal of laptop\\)"):
        claim(ours, smoke, "R")


def test_a_changed_or_malformed_record_is_refused_by_name(tmp_path):
    store = Store(tmp_path / "store")
    smoke = load_config("smoke")
    claim(store, smoke, "S")
    path = store.path(OWNER_FILE)
    path.write_text(path.read_text().replace('"smoke"', '"laptop"', 1))  # edited by hand: its receipt says so
    with pytest.raises(HashMismatchError, match="store.json"):
        claim(store, smoke, "S")
    store.put_json(OWNER_FILE, {"profile": "smoke"})  # receipted, but not a record
    with pytest.raises(StoreOwnerError, match=f"{path}: not a store record .*profile, sealed_profile"):
        claim(store, smoke, "S")


@pytest.mark.slow
def test_apsft_run_refuses_a_store_of_another_profile_before_writing(tmp_path):
    store, state = Store(tmp_path / "store"), tmp_path / "state"
    claim(store, load_config("smoke"), str(store.root))
    before = _files(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("APSFT_PROFILE", "APSFT_CONFIG", "APSFT_STORE_DIR",
                                                            "DAGSTER_HOME")}
    proc = subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "run", "--profile", "laptop", "--store",
                           str(store.root), "--to", "tasks_and_model_job"], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, env={**env, "APSFT_STATE_DIR": str(state)}, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"apsft: error: store {store.root} belongs to profile smoke" in proc.stderr
    assert _files(tmp_path) == before and not state.exists()  # no store file, no instance, no state folder
