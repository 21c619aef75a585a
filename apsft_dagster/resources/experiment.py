"""The experiment resource: the validated config and the artifact store of one profile."""

from __future__ import annotations

import os

import dagster as dg

from apsft_dagster.core.config import Config, load_config
from apsft_dagster.core.paths import store_root
from apsft_dagster.core.store import Store


class ExperimentResource(dg.ConfigurableResource):
    """`profile` names `configs/<profile>.yaml`; `config_path` (a YAML file) wins over it."""

    profile: str = "smoke"
    config_path: str | None = None
    store_dir: str | None = None

    @classmethod
    def from_env(cls) -> ExperimentResource:
        return cls(profile=os.environ.get("APSFT_PROFILE") or "smoke",
                   config_path=os.environ.get("APSFT_CONFIG") or None,
                   store_dir=os.environ.get("APSFT_STORE_DIR") or None)

    def config(self) -> Config:
        return load_config(self.profile, self.config_path)

    def store(self) -> Store:
        return Store(self.store_dir or store_root(self.config().profile))
