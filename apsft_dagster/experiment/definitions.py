"""The experiment's assets and jobs."""

import dagster as dg

from apsft_dagster.experiment.stages import STAGES
from apsft_dagster.stage import stage_assets, stage_jobs

defs = dg.Definitions(assets=stage_assets(STAGES), jobs=stage_jobs(STAGES))
