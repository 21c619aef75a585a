"""Assembles assets, checks, resources, jobs and sensors; nothing else."""

import dagster as dg

from apsft_dagster.assets.base_model import base_model
from apsft_dagster.assets.task_catalog import task_catalog
from apsft_dagster.resources import ExperimentResource
from apsft_dagster.sensors import sensors

main_job = dg.define_asset_job("main", selection=dg.AssetSelection.all(),
                               description="Everything built so far, end to end, on the selected profile.")

defs = dg.Definitions(
    assets=[task_catalog, base_model],
    jobs=[main_job],
    sensors=sensors,
    resources={"experiment": ExperimentResource.from_env()},
)
