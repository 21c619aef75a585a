"""The training resource: LoRA training and merging on the profile's device, memory freed after each."""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from apsft_dagster.core.base_model import base_model_path
from apsft_dagster.core.engines.lifetime import preflight
from apsft_dagster.core.engines.memory import free_memory
from apsft_dagster.resources.experiment import ExperimentResource


class TrainingResource(dg.ConfigurableResource):
    """`warmup(arm)` measures training tokens/s for the budget gate; `train(policy)` trains one
    policy into the store. Device, dtype and quantization come from the profile (`compute`)."""

    experiment: ExperimentResource

    def _base(self) -> str:
        config = self.experiment.config()
        preflight(config, "training")
        return str(base_model_path(config, self.experiment.store()))

    def warmup(self, arm: str) -> float | None:
        from apsft_dagster.core.training.policy import warmup_tokens_per_s  # torch: only when training

        try:
            return warmup_tokens_per_s(self.experiment.store(), self.experiment.config(), self._base(), arm)
        finally:
            free_memory()

    def train(self, policy: str, manifest_sha256: str, log: Callable[[str], None]) -> dict:
        from apsft_dagster.core.training.policy import train_policy

        try:
            return train_policy(self.experiment.store(), self.experiment.config(), policy, self._base(),
                                manifest_sha256, log)
        finally:
            free_memory()
