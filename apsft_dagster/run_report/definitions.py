"""The RL run report's assets, jobs and inbox sensor."""

import dagster as dg

from apsft_dagster.run_report.sensors import rl_inbox_sensor
from apsft_dagster.run_report.stages import RUN_REPORT_STAGES
from apsft_dagster.stage import stage_assets, stage_jobs

defs = dg.Definitions(assets=stage_assets(RUN_REPORT_STAGES), jobs=stage_jobs(RUN_REPORT_STAGES),
                      sensors=[rl_inbox_sensor])
