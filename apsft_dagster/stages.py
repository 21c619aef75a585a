"""The stages of the experiment, in order: one job each, and whether it holds a model engine.

`apsft run` and the tests run exactly this list (`runner.run_stages`). A stage that holds an
engine on the profile's device runs in its own process on a GPU, so memory returns between
stages; a partitioned stage runs its partitions as single runs over contiguous key ranges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg

from apsft_dagster.assets.analysis import stage_a_analysis, stage_b_plan
from apsft_dagster.assets.audits import audit_assets, loss_mask_audit_assets, run_report_audit_assets
from apsft_dagster.assets.base_model import base_model
from apsft_dagster.assets.evaluation import stage_a_eval, stage_a_generations
from apsft_dagster.assets.evidence_seal import evidence_seal
from apsft_dagster.assets.generation_audit import generation_audit
from apsft_dagster.assets.loss_mask import lm_build, lm_census, lm_verify
from apsft_dagster.assets.loss_mask_pack import lm_pack, lm_pack_comparison
from apsft_dagster.assets.merged_models import merged_models
from apsft_dagster.assets.r1_labels import r1_labels, r1_labels_index
from apsft_dagster.assets.report import experiment_report
from apsft_dagster.assets.run_report import rl_run_evidence, run_report
from apsft_dagster.assets.score_bank import parity_gate, score_bank, score_bank_index
from apsft_dagster.assets.sft_arms import sft_arms, sft_manifest
from apsft_dagster.assets.stage_b import stage_b_analysis, stage_b_eval, stage_b_generations
from apsft_dagster.assets.task_catalog import task_catalog
from apsft_dagster.assets.trace_bank import trace_bank, trace_bank_index
from apsft_dagster.assets.training import adapters
from apsft_dagster.partitions import STAGE_A_POLICIES
from apsft_dagster.run_tags import gpu_run_tags


def _planned(field: str) -> Callable[[dg.Definitions], list[str]]:
    def keys(defs: dg.Definitions) -> list[str]:
        from apsft_dagster.core.layout import STAGE_B_PLAN

        store = defs.resources["experiment"].store()
        return list(store.get_json(STAGE_B_PLAN)[field]) if store.exists(STAGE_B_PLAN) else []

    keys.__doc__ = f"Stage B's plan's {field}, read from the run's store (none when Stage A does not trigger)."
    return keys


replication_policies = _planned("replication_policies")  # the seed-43 policies to train, merge and probe
stage_b_policies = _planned("greedy_policies")  # every policy Stage B evaluates (the sampled ones among them)


@dataclass(frozen=True)
class Stage:
    job: str
    assets: tuple[dg.AssetsDefinition, ...]
    engine: bool = False  # loads a model on compute.device (generation, scoring, training)
    default_keys: tuple[str, ...] | None = None  # the partitions `apsft run` runs unless told otherwise
    # Partitions decided at run time from what earlier stages wrote (e.g. Stage B's plan); an
    # empty list skips the stage.
    keys_at_run: Callable[[dg.Definitions], list[str]] | None = None

    @property
    def partitions_def(self) -> dg.PartitionsDefinition | None:
        return next((a.partitions_def for a in self.assets if a.partitions_def is not None), None)


STAGES = (
    Stage("tasks_and_model_job", (task_catalog, base_model)),
    Stage("trace_bank_job", (trace_bank,), engine=True),
    Stage("bank_and_parity_job", (trace_bank_index, parity_gate), engine=True),
    Stage("score_bank_job", (score_bank,), engine=True),
    Stage("score_bank_index_job", (score_bank_index,)),
    Stage("r1_labels_job", (r1_labels,), engine=True),
    Stage("r1_labels_index_job", (r1_labels_index,)),
    Stage("evidence_seal_job", (evidence_seal,)),
    Stage("sft_arms_job", (sft_arms,)),
    Stage("sft_manifest_and_audits_job", (sft_manifest, *audit_assets)),
    Stage("adapters_job", (adapters,), engine=True, default_keys=STAGE_A_POLICIES),  # seed 43: when Stage B asks
    Stage("merged_models_job", (merged_models,), engine=True, default_keys=STAGE_A_POLICIES),
    Stage("stage_a_generations_job", (stage_a_generations,), engine=True),
    Stage("stage_a_eval_job", (stage_a_eval,)),
    Stage("stage_a_analysis_job", (stage_a_analysis, stage_b_plan, generation_audit)),
    # Stage B's seed-43 replication: the policies its plan names (none when Stage A does not trigger)
    Stage("replication_adapters_job", (adapters,), engine=True, keys_at_run=replication_policies),
    Stage("replication_merged_models_job", (merged_models,), engine=True, keys_at_run=replication_policies),
    Stage("stage_b_generations_job", (stage_b_generations,), engine=True, keys_at_run=stage_b_policies),
    Stage("stage_b_eval_job", (stage_b_eval,), keys_at_run=stage_b_policies),
    Stage("verdict_and_report_job", (stage_b_analysis, experiment_report)),
)
# The loss-mask group (seed 004), a sibling system: one run per registered dataset version, then
# its SQL audits. `apsft loss-mask run NAME` runs these; `apsft run` does not.
LOSS_MASK_STAGES = (
    Stage("loss_mask_job", (lm_census, lm_build, lm_verify, lm_pack, lm_pack_comparison)),
    Stage("loss_mask_audits_job", tuple(loss_mask_audit_assets)),
)
# The RL run report (seed 000), a sibling system: one run per registered run folder (the inbox
# sensor requests it), then its SQL audits. `apsft rl-report add NAME FOLDER` runs these by hand.
RUN_REPORT_STAGES = (
    Stage("run_report_job", (rl_run_evidence, run_report)),
    Stage("run_report_audits_job", tuple(run_report_audit_assets)),
)
SIBLING_STAGES = (*LOSS_MASK_STAGES, *RUN_REPORT_STAGES)
# each asset once: the replication stages select adapters / merged_models again
ASSETS = list(dict.fromkeys(a for stage in (*STAGES, *SIBLING_STAGES) for a in stage.assets))
_GPU_TAGS = gpu_run_tags()  # read from the environment once, for every engine stage
JOBS = [dg.define_asset_job(s.job, selection=list(s.assets),
                            tags={"apsft/engine": str(s.engine).lower(), **(_GPU_TAGS if s.engine else {})})
        for s in (*STAGES, *SIBLING_STAGES)]
