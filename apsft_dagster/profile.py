"""The profile the definitions are built from: the environment's choice, read here and only here.

`APSFT_PROFILE`, `APSFT_CONFIG` and `APSFT_STORE_DIR` are the CLI's way in (`apsft ui` and `dagster dev`
load `apsft_dagster.definitions` in a process of their own): `environment_choice` reads them, and the
workspace's `defs` is `definitions_for(*environment_choice())`. Everything below takes the choice as
values (`definitions.definitions_for`, the experiment resource's fields).

The experiment's partitions are derived from the definitions' config once per process
(`definitions_config`), so a code location never mixes two configs; the experiment resource refuses a
run whose own fields resolve to another one.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import NamedTuple

from apsft_dagster.core.config import Config, load_config


class Choice(NamedTuple):
    """A profile (`configs/<profile>.yaml`), a profile YAML file that wins over it, and the store's root
    (a folder or an `s3://` URL; None: the profile's own store, `<state>/store/<profile>`)."""

    profile: str = "smoke"
    config_path: str | None = None
    store_dir: str | None = None


def environment_choice(environ: Mapping[str, str] = os.environ) -> Choice:
    """`APSFT_PROFILE` (default smoke), `APSFT_CONFIG` and `APSFT_STORE_DIR`, unset or empty as None."""
    return Choice(environ.get("APSFT_PROFILE") or "smoke", environ.get("APSFT_CONFIG") or None,
                  environ.get("APSFT_STORE_DIR") or None)


@functools.cache
def definitions_config() -> Config:
    """The config of the environment's choice (`APSFT_CONFIG` wins over `APSFT_PROFILE`), as at first use."""
    choice = environment_choice()
    return load_config(choice.profile, choice.config_path)
