"""The profile the definitions are built from, loaded once per process.

Partitions and the default resources both come from it, so a code location never mixes two
configs; the experiment resource refuses a run whose own fields resolve to another one.
"""

from __future__ import annotations

import functools

from apsft_dagster.core.config import Config, load_config


@functools.cache
def definitions_config() -> Config:
    """`APSFT_CONFIG`, else `configs/$APSFT_PROFILE.yaml` (default smoke), as at first use."""
    return load_config()
