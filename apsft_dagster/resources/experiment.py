"""The experiment resource: the validated config and the artifact store of one profile."""

from __future__ import annotations

import dagster as dg
from pydantic import PrivateAttr

from apsft_dagster.core.config import Config, load_config
from apsft_dagster.core.errors import ConfigError
from apsft_dagster.core.object_store import open_store
from apsft_dagster.core.paths import profile_store
from apsft_dagster.core.store import Store
from apsft_dagster.core.text_protocol import for_config


class ExperimentResource(dg.ConfigurableResource):
    """`profile` names `configs/<profile>.yaml`; `config_path` (a YAML file) wins over it; `store_dir` is
    the store's root (a folder or an `s3://` URL; None: the profile's own, `<state>/store/<profile>`).
    The fields are the whole choice: the resource reads no environment variable
    (`definitions.definitions_for` sets them; the workspace's from `profile.environment_choice`).

    `definitions_digest` is the digest of the config the definitions (partitions) were built
    from; a run whose fields resolve to another config is refused before any asset runs.
    """

    profile: str = "smoke"
    config_path: str | None = None
    store_dir: str | None = None
    definitions_digest: str | None = None
    _config: Config | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._config = None
        self.config()  # parse and compare once, before any asset of the run executes

    def config(self) -> Config:
        """The run's config, parsed once (per run inside Dagster, per object outside it)."""
        if self._config is None:
            config = load_config(self.profile, self.config_path)
            if self.definitions_digest and config.digest != self.definitions_digest:
                raise ConfigError(
                    f"experiment resource (profile={self.profile!r}, config_path={self.config_path!r}) resolves to "
                    f"config {config.digest} ({config.profile}), but the definitions were built from "
                    f"{self.definitions_digest}: partitions and resources would disagree. Choose the profile "
                    "with APSFT_PROFILE / APSFT_CONFIG (or apsft run --profile) before the definitions load")
            for_config(config)  # this process's text protocol: the snapshot's template and the profile's markers
            self._config = config
        return self._config

    def store(self) -> Store:
        return open_store(self.store_dir or profile_store(self.config().profile))
