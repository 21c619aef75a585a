"""Where things are on this machine: the project's folders, and state in a project-local `.apsft/`
folder by default (override with env vars). The ground floor: it imports nothing of the package."""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = PROJECT_ROOT / "configs"
OBJECT_SCHEME = "s3://"


def is_object_url(location: object) -> bool:
    return isinstance(location, str) and location.startswith(OBJECT_SCHEME)


def local_model_dir(model_path: str) -> Path:
    """Where the local snapshot is on this machine: `APSFT_MODEL_DIR`, else `model_path` (the
    config's `model.path`, relative to the project root). The config and its digest keep the path as written."""
    found = Path(os.environ.get("APSFT_MODEL_DIR") or model_path).expanduser()
    return found if found.is_absolute() else PROJECT_ROOT / found


def state_dir() -> Path:
    return Path(os.environ.get("APSFT_STATE_DIR") or PROJECT_ROOT / ".apsft")


def model_cache_dir() -> Path | None:
    """The embedded models' cache folder (`APSFT_MODEL_CACHE`, default `<state>/model_cache`), or None
    when it is `off` (core/embedded/cache.py)."""
    value = os.environ.get("APSFT_MODEL_CACHE")
    if value == "off":
        return None
    return Path(value) if value else state_dir() / "model_cache"


def store_root(profile: str) -> Path | str:
    """One artifact store per profile, so smoke and full never share files. APSFT_STORE_DIR may
    name a folder or an object store URL (`s3://bucket/prefix`, kept as text)."""
    override = os.environ.get("APSFT_STORE_DIR")
    if is_object_url(override):
        return override
    return Path(override) if override else profile_store(profile)


def profile_store(profile: str) -> Path:
    """A profile's own store, `<state>/store/<profile>`, whatever `APSFT_STORE_DIR` says."""
    return state_dir() / "store" / profile


LOCAL_INSTANCE_YAML = """\
telemetry:
  enabled: false
nux:
  enabled: false  # no newsletter pop-up on a first visit to the UI
concurrency:
  pools:
    default_limit: 1  # one engine-holding (gpu pool) step at a time on this machine
run_coordinator:  # Dagster's default (runs launch at once); a UI launch gets its asset's stage's tags
  module: apsft_dagster.run_coordinator
  class: StageRunCoordinator
"""


def store_instance(store: str | os.PathLike, state: Path | None = None) -> Path:
    """The Dagster instance of one store, `<state>/instances/<slug>`: a store's runs, partitions and
    checks are recorded apart from every other store's, so the UI of one never shows another's (issue 58).
    The slug is the folder's name for a store in `<state>/store/` (a profile's default store: `smoke`),
    else the store's last name and 10 hex of the SHA-256 of its resolved path or URL (`copy-3f2a...`)."""
    state = state or state_dir()
    if is_object_url(store):
        location = str(store).rstrip("/")
        name = location.rsplit("/", 1)[-1]
    else:
        path = Path(store).expanduser().resolve()
        location, name = str(path), path.name
        if path.parent == (state / "store").resolve() and _readable(name) == name:
            return state / "instances" / name
    digest = hashlib.sha256(location.encode()).hexdigest()[:10]
    return state / "instances" / f"{_readable(name) or 'store'}-{digest}"


def _readable(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".")


def dagster_home(store: str | os.PathLike) -> Path:
    """`DAGSTER_HOME` when set (a team's instance, deploy/: it then records every store it is given,
    as one instance does), else the store's own instance (`store_instance`)."""
    given = os.environ.get("DAGSTER_HOME")
    return Path(given) if given else store_instance(store)


def ensure_dagster_home(store: str | os.PathLike) -> Path:
    """Create the store's DAGSTER_HOME with telemetry and the UI's first-visit prompt off, the `gpu`
    pool at one step at a time (CPU stages still run beside it) and apsft's run coordinator (a UI
    launch of an asset runs with its stage's tags), and export it for this process and its children.
    An existing dagster.yaml is the user's and is left as it is. When it makes a store's instance
    beside the one every store shared before (`<state>/dagster_home`), it says so once."""
    home = dagster_home(store)
    home.mkdir(parents=True, exist_ok=True)
    settings = home / "dagster.yaml"
    if not settings.exists():
        settings.write_text(LOCAL_INSTANCE_YAML)
        if (shared := state_dir() / "dagster_home").is_dir() and shared.resolve() != home.resolve():
            print(f"apsft: {store}'s runs are now recorded in its own instance {home}; the runs before, every "
                  f"store's together, stay in {shared} (not moved; `DAGSTER_HOME={shared} apsft ui` opens it)",
                  file=sys.stderr, flush=True)
    os.environ["DAGSTER_HOME"] = str(home)
    return home
