"""The `seeds` section: the experiment's seed and each task space's."""

from __future__ import annotations

from apsft_dagster.core.config.base import NonNegInt, Strict


class Seeds(Strict):
    experiment: NonNegInt
    replication: NonNegInt
    train_tasks: NonNegInt
    eval_tasks: NonNegInt
    pretrain_tasks: NonNegInt
    probe_tasks: NonNegInt  # the deployment probe's prompts: their own seed space, never an eval task
