"""Where state lives by default: a project-local `.apsft/` folder (override with env vars)."""

from __future__ import annotations

import os
from pathlib import Path

from apsft_dagster.core.config import PROJECT_ROOT


def state_dir() -> Path:
    return Path(os.environ.get("APSFT_STATE_DIR") or PROJECT_ROOT / ".apsft")


def store_root(profile: str) -> Path:
    """One artifact store per profile, so smoke and full never share files."""
    override = os.environ.get("APSFT_STORE_DIR")
    return Path(override) if override else state_dir() / "store" / profile


def dagster_home() -> Path:
    return Path(os.environ.get("DAGSTER_HOME") or state_dir() / "dagster_home")


def ensure_dagster_home() -> Path:
    """Create DAGSTER_HOME with telemetry off and export it for this process and its children."""
    home = dagster_home()
    home.mkdir(parents=True, exist_ok=True)
    settings = home / "dagster.yaml"
    if not settings.exists():
        settings.write_text("telemetry:\n  enabled: false\n")
    os.environ["DAGSTER_HOME"] = str(home)
    return home
