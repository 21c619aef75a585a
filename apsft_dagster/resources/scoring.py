"""The scoring resource: the base model behind two instruments, each built once per run."""

from __future__ import annotations

import dagster as dg
from pydantic import PrivateAttr

from apsft_dagster.core.base_model import base_model_path
from apsft_dagster.core.engines.lifetime import load_causal_lm, one_instrument_resident, preflight
from apsft_dagster.core.engines.memory import free_memory
from apsft_dagster.resources.experiment import ExperimentResource


class ScoringResource(dg.ConfigurableResource):
    """`instrument("reference")`: single-context scoring of record (batched as `scoring.reference_batch_tokens`
    says: null, one record per forward). `instrument("fast")`: batched
    Transformers, or vLLM prompt log-probs when `harvest.backend` is vllm. Device and dtype come
    from the profile (`compute`); both instruments are built on first use and kept for the run,
    except on CUDA with vLLM (`one_instrument_resident`): building one releases the other first
    (the reference model is loaded again if the bank is scored by it after the gate)."""

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
            preflight(config, "scoring")
            path = str(base_model_path(config, self.experiment.store()))
            self._loaded = (*load_causal_lm(path, config.compute), path)
        return self._loaded

    def instrument(self, name: str):
        if name not in self._instruments:
            self._make_room(name)
            self._instruments[name] = self._build(name)
        return self._instruments[name]

    def _make_room(self, name: str) -> None:
        """Where the instruments take turns, release the other one and hand its memory back
        before `name` is built: the reference model before vLLM starts, vLLM before the
        reference model is loaded again."""
        config = self.experiment.config()
        if not one_instrument_resident(config.compute, config.harvest.backend):
            return
        others = [n for n in self._instruments if n != name]
        for other in others:
            getattr(self._instruments.pop(other), "close", lambda: None)()
        if name == "fast" and self._loaded is not None:
            self._loaded, others = None, [*others, "model"]
        if others:
            free_memory()

    def _build(self, name: str):
        from apsft_dagster.core.instruments import BatchedInstrument, ReferenceInstrument

        config = self.experiment.config()
        if name == "fast" and config.harvest.backend == "vllm":
            from apsft_dagster.core.engines.vllm_scoring import VllmInstrument

            path = str(base_model_path(config, self.experiment.store()))
            return VllmInstrument(path, config.compute, config.vllm)
        model, tokenizer, _ = self._model()
        if name == "reference":  # batch of one where the profile keeps the registered instrument (`full`)
            return ReferenceInstrument(model, tokenizer, config.scoring.reference_batch_tokens)
        return BatchedInstrument(model, tokenizer, self.batch_size)
