"""Where things are on this machine: the project's folders, and state in a project-local `.apsft/`
folder by default (override with env vars). The ground floor: it imports nothing of the package."""

from __future__ import annotations

import os
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
    return Path(override) if override else state_dir() / "store" / profile


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


def dagster_home() -> Path:
    return Path(os.environ.get("DAGSTER_HOME") or state_dir() / "dagster_home")


def ensure_dagster_home() -> Path:
    """Create DAGSTER_HOME with telemetry and the UI's first-visit prompt off, the `gpu` pool at one
    step at a time (CPU stages still run beside it) and apsft's run coordinator (a UI launch of an
    asset runs with its stage's tags), and export it for this process and its children. An existing
    dagster.yaml is the user's and is left as it is."""
    home = dagster_home()
    home.mkdir(parents=True, exist_ok=True)
    settings = home / "dagster.yaml"
    if not settings.exists():
        settings.write_text(LOCAL_INSTANCE_YAML)
    os.environ["DAGSTER_HOME"] = str(home)
    return home
