"""The stages of the experiment, in order: one job each, and whether it holds a model engine.

`apsft run` and the tests run exactly this list (`runner.run_stages`). A stage that holds an
engine on the profile's device runs in its own process on a GPU, so memory returns between
stages; a partitioned stage runs its partitions as single runs over contiguous key ranges.
"""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from apsft_dagster.assets.audits import place_audits
from apsft_dagster.experiment.assets.analysis import stage_a_analysis
from apsft_dagster.experiment.assets.base_model import base_model
from apsft_dagster.experiment.assets.evaluation import stage_a_eval, stage_a_generations
from apsft_dagster.experiment.assets.evidence_seal import evidence_seal
from apsft_dagster.experiment.assets.generation_audit import generation_audit
from apsft_dagster.experiment.assets.merged_models import merged_models, replication_merged_models
from apsft_dagster.experiment.assets.r1_labels import r1_labels, r1_labels_index
from apsft_dagster.experiment.assets.report import experiment_report
from apsft_dagster.experiment.assets.score_bank import parity_gate, score_bank, score_bank_index
from apsft_dagster.experiment.assets.sft_arms import sft_arms, sft_manifest
from apsft_dagster.experiment.assets.stage_b import stage_b_analysis, stage_b_eval, stage_b_generations, stage_b_plan
from apsft_dagster.experiment.assets.task_catalog import task_catalog
from apsft_dagster.experiment.assets.trace_bank import trace_bank, trace_bank_index
from apsft_dagster.experiment.assets.training import adapters, replication_adapters
from apsft_dagster.experiment.partitions import REPLICATION_KEYS, STAGE_B_KEYS
from apsft_dagster.stage import Stage


def _planned(field: str) -> Callable[[dg.Definitions], list[str]]:
    def keys(defs: dg.Definitions) -> list[str]:
        from apsft_dagster.core.layout import STAGE_B_PLAN

        store = defs.resources["experiment"].store()
        return list(store.get_json(STAGE_B_PLAN)[field]) if store.exists(STAGE_B_PLAN) else []

    keys.__doc__ = f"Stage B's plan's {field}, read from the run's store (none when Stage A does not trigger)."
    return keys


replication_policies = _planned("replication_policies")  # the seed-43 policies to train, merge and probe
stage_b_policies = _planned("greedy_policies")  # every policy Stage B evaluates (the sampled ones among them)


# the stages as listed; STAGES places the SQL audits in them (assets/audits.py)
PLAN = (
    Stage("tasks_and_model_job", (task_catalog, base_model)),
    Stage("trace_bank_job", (trace_bank,), engine=True),
    Stage("bank_and_parity_job", (trace_bank_index, parity_gate), engine=True),
    Stage("score_bank_job", (score_bank,), engine=True),
    Stage("score_bank_index_job", (score_bank_index,)),
    Stage("r1_labels_job", (r1_labels,), engine=True),
    Stage("r1_labels_index_job", (r1_labels_index,)),
    Stage("evidence_seal_job", (evidence_seal,)),
    Stage("sft_arms_job", (sft_arms,)),
    Stage("sft_manifest_and_audits_job", (sft_manifest,), hosts_audits=True),
    Stage("adapters_job", (adapters,), engine=True),
    Stage("merged_models_job", (merged_models,), engine=True),
    Stage("stage_a_generations_job", (stage_a_generations,), engine=True),
    Stage("stage_a_eval_job", (stage_a_eval,)),
    Stage("stage_a_analysis_job", (stage_a_analysis, stage_b_plan, generation_audit), hosts_audits=True),
    # Stage B's seed-43 replication: the policies its plan names (none when Stage A does not trigger)
    Stage("replication_adapters_job", (replication_adapters,), engine=True, keys_at_run=replication_policies,
          known_keys=REPLICATION_KEYS),
    Stage("replication_merged_models_job", (replication_merged_models,), engine=True,
          keys_at_run=replication_policies, known_keys=REPLICATION_KEYS),
    Stage("stage_b_generations_job", (stage_b_generations,), engine=True, keys_at_run=stage_b_policies,
          known_keys=STAGE_B_KEYS),
    Stage("stage_b_eval_job", (stage_b_eval,), keys_at_run=stage_b_policies, known_keys=STAGE_B_KEYS),
    Stage("verdict_and_report_job", (stage_b_analysis, experiment_report), hosts_audits=True),
)
STAGES = place_audits(PLAN, ran_by="`apsft run` (the experiment)")
# The review points (core/config/sections/review.py POINTS) -> the job a run pauses after: the seal, and
# selection with its manifest and audits (the last stage before training).
REVIEW_POINTS = {"seal": "evidence_seal_job", "selection": "sft_manifest_and_audits_job"}
