"""Assembles assets, checks, resources, jobs and sensors; nothing else."""

import dagster as dg

from apsft_dagster.assets.audits import audit_assets
from apsft_dagster.assets.base_model import base_model
from apsft_dagster.assets.evidence_seal import evidence_seal
from apsft_dagster.assets.r1_labels import r1_labels, r1_labels_index
from apsft_dagster.assets.score_bank import parity_gate, score_bank, score_bank_index
from apsft_dagster.assets.sft_arms import sft_arms, sft_manifest
from apsft_dagster.assets.task_catalog import task_catalog
from apsft_dagster.assets.trace_bank import trace_bank, trace_bank_index
from apsft_dagster.resources import default_resources
from apsft_dagster.sensors import sensors

# One job per partitioning; `apsft run` runs them in this order (STAGE_JOBS), the partitioned
# ones as a single run over every partition.
STAGE_JOBS = [
    dg.define_asset_job("tasks_and_model_job", selection=[task_catalog, base_model]),
    dg.define_asset_job("trace_bank_job", selection=[trace_bank]),
    dg.define_asset_job("bank_and_parity_job", selection=[trace_bank_index, parity_gate]),
    dg.define_asset_job("score_bank_job", selection=[score_bank]),
    dg.define_asset_job("score_bank_index_job", selection=[score_bank_index]),
    dg.define_asset_job("r1_labels_job", selection=[r1_labels]),
    dg.define_asset_job("r1_labels_index_job", selection=[r1_labels_index]),
    dg.define_asset_job("evidence_seal_job", selection=[evidence_seal]),
    dg.define_asset_job("sft_arms_job", selection=[sft_arms]),
    dg.define_asset_job("sft_manifest_and_audits_job", selection=[sft_manifest, *audit_assets]),
]

defs = dg.Definitions(
    assets=[task_catalog, base_model, trace_bank, trace_bank_index, parity_gate, score_bank, score_bank_index,
            r1_labels, r1_labels_index, evidence_seal, sft_arms, sft_manifest, *audit_assets],
    jobs=STAGE_JOBS,
    sensors=sensors,
    resources=default_resources(),
)
