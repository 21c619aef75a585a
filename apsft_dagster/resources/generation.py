"""The generation resource: an engine for a model directory, at most one resident per run."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from apsft_dagster.core.base_model import base_model_path
from apsft_dagster.core.engines.base import GenerationEngine
from apsft_dagster.core.engines.lifetime import load_generation_engine, preflight
from apsft_dagster.core.engines.memory import free_memory
from apsft_dagster.core.text_protocol import for_config
from apsft_dagster.resources.experiment import ExperimentResource


class GenerationResource(dg.ConfigurableResource):
    """`engine()` serves the base model, `engine(path)` a merged model. Asking for another model
    first releases the resident one (and its CUDA memory); teardown releases the last. The
    engine (`harvest.backend`) and the device and dtype (`compute`) come from the profile."""

    experiment: ExperimentResource
    _resident: tuple[str, GenerationEngine] | None = PrivateAttr(default=None)
    _base: str | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._resident, self._base = None, None

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.release()

    def engine(self, model_dir: str | Path | None = None) -> GenerationEngine:
        config = self.experiment.config()
        if model_dir is None and self._base is None:  # verified once per run, not on every request
            self._base = str(base_model_path(config, self.experiment.store()))
        path = str(model_dir or self._base)
        if self._resident is not None and self._resident[0] == path:
            return self._resident[1]
        self.release()
        preflight(config, "generation")
        engine = load_generation_engine(path, config.harvest.backend, config.compute, for_config(config).stop,
                                        config.vllm)
        self._resident = (path, engine)
        return engine

    @property
    def resident(self) -> str | None:
        """The model directory whose engine is loaded, if any."""
        return None if self._resident is None else self._resident[0]

    def release(self) -> None:
        if self._resident is not None:
            engine, self._resident = self._resident[1], None
            engine.close()
            del engine
            free_memory()
