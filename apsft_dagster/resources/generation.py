"""The generation resource: one engine (Transformers or vLLM, by config) per run."""

import dagster as dg
from pydantic import PrivateAttr

from apsft_dagster.core.engines.base import GenerationEngine
from apsft_dagster.core.model_dir import base_model_path
from apsft_dagster.core.protocol import IM_END, THINK_CLOSE
from apsft_dagster.resources.experiment import ExperimentResource

STOP_TOKENS = (THINK_CLOSE, IM_END)


class GenerationResource(dg.ConfigurableResource):
    """Loads the base model once per run, on first use (a run that never samples loads nothing).

    `harvest.backend` picks the engine; `device`/`dtype` apply to the Transformers engine
    (dtype "auto": bfloat16 on cuda, float32 on cpu).
    """

    experiment: ExperimentResource
    device: str = "cpu"
    dtype: str = "auto"
    _engine: GenerationEngine | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._engine = None

    def engine(self) -> GenerationEngine:
        if self._engine is None:
            config = self.experiment.config()
            path = str(base_model_path(config, self.experiment.store()))
            if config.harvest.backend == "vllm":
                from apsft_dagster.core.engines.vllm_engine import VllmEngine

                self._engine = VllmEngine(path, STOP_TOKENS)
            else:
                from apsft_dagster.core.engines.transformers_engine import TransformersEngine

                self._engine = TransformersEngine.load(path, STOP_TOKENS, self.device, self.dtype)
        return self._engine
