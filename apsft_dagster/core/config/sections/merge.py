"""The `merge` section: what is kept of each merged model."""

from __future__ import annotations

from apsft_dagster.core.config.base import Strict


class Merge(Strict):
    keep_weights: bool  # false: keep each merged model's fingerprint, delete its weights after evaluation
