"""The loss-mask curation's assets and jobs."""

import dagster as dg

from apsft_dagster.loss_mask.stages import LOSS_MASK_STAGES
from apsft_dagster.stage import stage_assets, stage_jobs

defs = dg.Definitions(assets=stage_assets(LOSS_MASK_STAGES), jobs=stage_jobs(LOSS_MASK_STAGES))
