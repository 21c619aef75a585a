"""The `model` section: which policy the experiment trains (the embedded one, or a local snapshot)."""

from __future__ import annotations

from typing import Literal

from apsft_dagster.core.config.base import Strict

ARCHITECTURES = ("qwen3_5", "qwen3")  # what the embedded build makes; a local snapshot says its own


class ModelSpec(Strict):
    source: Literal["embedded", "local"]
    name: str
    path: str | None = None
    revision: str | None = None
    # embedded only: which layout the build makes. A local snapshot's architecture is read from its
    # config.json (core/snapshot.py), never from the profile.
    architecture: Literal[ARCHITECTURES] | None = None
