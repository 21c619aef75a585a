"""The scoring resource: the base model behind two instruments, each built once per run."""

from __future__ import annotations

import dagster as dg
from pydantic import PrivateAttr

from apsft_dagster.core.engines.lifetime import load_causal_lm, require_device
from apsft_dagster.core.engines.memory import free_memory
from apsft_dagster.core.base_model import base_model_path
from apsft_dagster.resources.experiment import ExperimentResource


class ScoringResource(dg.ConfigurableResource):
    """`instrument("reference")`: single-context scoring of record. `instrument("fast")`: batched
    Transformers, or vLLM prompt log-probs when `harvest.backend` is vllm. Device and dtype come
    from the profile (`compute`); both instruments are built on first use and kept for the run."""

    experiment: ExperimentResource
    batch_size: int = 16
    _instruments: dict = PrivateAttr(default_factory=dict)
    _loaded: tuple | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._instruments, self._loaded = {}, None

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        for instrument in self._instruments.values():
            getattr(instrument, "close", lambda: None)()
        self._instruments, self._loaded = {}, None
        free_memory()

    def _model(self) -> tuple:
        if self._loaded is None:
            config = self.experiment.config()
            require_device(config.compute, "scoring", config.profile)
            path = str(base_model_path(config, self.experiment.store()))
            self._loaded = (*load_causal_lm(path, config.compute), path)
        return self._loaded

    def instrument(self, name: str):
        if name not in self._instruments:
            self._instruments[name] = self._build(name)
        return self._instruments[name]

    def _build(self, name: str):
        from apsft_dagster.core.instruments import BatchedInstrument, ReferenceInstrument

        config = self.experiment.config()
        if name == "fast" and config.harvest.backend == "vllm":
            from apsft_dagster.core.engines.vllm_scoring import VllmInstrument

            path = str(base_model_path(config, self.experiment.store()))
            return VllmInstrument(path, config.compute, config.vllm)
        model, tokenizer, _ = self._model()
        return ReferenceInstrument(model, tokenizer) if name == "reference" else BatchedInstrument(
            model, tokenizer, self.batch_size)
