"""A store belongs to one profile (issue 58): its first `apsft run` records the profile in the store
(`store.json`, receipted) once the run's checks passed, and a run of another profile is refused
before anything is written.

What the store holds is the registered profile's evidence, so the rule compares sealed profiles
(`Config.sealed_profile`): a declared rehearsal shares its registered profile's Stage A
(core/rehearsal.py) and may run on that profile's store, as docs/experiment.md shows. A store made
before the record existed adopts the profile of its next run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apsft_dagster.core.errors import StoreOwnerError

if TYPE_CHECKING:
    from apsft_dagster.core.config import Config
    from apsft_dagster.core.store import Store

OWNER_FILE = "store.json"
FIELDS = ("profile", "sealed_profile")  # no date: two runs of a profile write the same bytes


def record(config: Config) -> dict:
    """What the store records of its profile on its first run."""
    return {"profile": config.profile, "sealed_profile": config.sealed_profile}


def owner(store: Store) -> dict | None:
    """The store's record, None when it has none (a new store, or one made before records); a record
    not in `record`'s shape is refused by name (a changed file fails its receipt in `get_json`)."""
    if not store.exists(OWNER_FILE):
        return None
    found = store.get_json(OWNER_FILE)
    if not (isinstance(found, dict) and set(found) == set(FIELDS) and all(isinstance(found[k], str) for k in FIELDS)):
        raise StoreOwnerError(f"{store.path(OWNER_FILE)}: not a store record (expected the text fields "
                              f"{', '.join(FIELDS)}); restore it, or delete it and its receipt so that the next "
                              "run records its profile")
    return found


def refusal(found: dict, config: Config, location: str) -> str | None:
    """Why `config` may not run on the store at `location` recorded as `found`, or None when it may."""
    if found["sealed_profile"] == config.sealed_profile:
        return None
    theirs = _named(found["profile"], found["sealed_profile"])
    ours = _named(config.profile, config.sealed_profile)
    return (f"store {location} belongs to profile {theirs} (recorded in its {OWNER_FILE} on its first run); "
            f"this run's profile is {ours}, whose evidence may not join it. Nothing was "
            f"written. Run {config.profile} on its own store (leave out --store and APSFT_STORE_DIR) or on a new "
            f"one (--store NEW_FOLDER); to go on with this store, run {found['profile']}")


def refuse_another(store: Store, config: Config, location: str) -> bool:
    """Before `apsft run` writes anything: StoreOwnerError when the store at `location` is recorded
    for another profile; True when it has no record yet (`adopt` it once every other check passed)."""
    found = owner(store)
    if found is not None and (why := refusal(found, config, location)):
        raise StoreOwnerError(why)
    return found is None


def adopt(store: Store, config: Config, location: str) -> str:
    """Record `config`'s profile in a store without a record; what to say about it."""
    made = record(config)
    store.put_json(OWNER_FILE, made)
    return (f"store {location} now belongs to profile {_named(made['profile'], made['sealed_profile'])} (its "
            f"{OWNER_FILE}); a run of another profile is refused on it")


def _named(profile: str, sealed: str) -> str:
    return profile if profile == sealed else f"{profile} (a rehearsal of {sealed})"
