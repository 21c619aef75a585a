"""The scoring resource: the base model and tokenizer, loaded once per run, behind two instruments."""

import dagster as dg
from pydantic import PrivateAttr

from apsft_dagster.core.model_dir import base_model_path
from apsft_dagster.resources.experiment import ExperimentResource


class ScoringResource(dg.ConfigurableResource):
    """`instrument("reference")`: single-context scoring of record (dtype "auto": bfloat16 on
    cuda, float32 on cpu). `instrument("fast")`: batched Transformers, or vLLM
    prompt log-probs when `harvest.backend` is vllm."""

    experiment: ExperimentResource
    device: str = "cpu"
    dtype: str = "auto"
    batch_size: int = 16
    _loaded: tuple | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._loaded = None

    def _model(self):
        if self._loaded is None:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            from apsft_dagster.core.engines.transformers_engine import torch_dtype

            path = base_model_path(self.experiment.config(), self.experiment.store())
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(self.dtype, self.device)).to(self.device).eval()
            self._loaded = (model, AutoTokenizer.from_pretrained(path), str(path))
        return self._loaded

    def instrument(self, name: str):
        from apsft_dagster.core.instruments import BatchedInstrument, ReferenceInstrument

        model, tokenizer, path = self._model()
        if name == "reference":
            return ReferenceInstrument(model, tokenizer)
        if self.experiment.config().harvest.backend == "vllm":
            from apsft_dagster.core.engines.vllm_scoring import VllmInstrument

            return VllmInstrument(path)
        return BatchedInstrument(model, tokenizer, self.batch_size)
