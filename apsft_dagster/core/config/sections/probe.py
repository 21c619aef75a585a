"""The `probe` section: the deployment probe's prompts."""

from __future__ import annotations

from apsft_dagster.core.config.base import PosInt, Strict


class Probe(Strict):
    prompts: PosInt
    max_new_tokens: PosInt
