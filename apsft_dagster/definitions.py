"""Assembles assets, checks, resources, jobs and sensors; nothing else."""

import dagster as dg

from apsft_dagster.resources import default_resources
from apsft_dagster.sensors import sensors
from apsft_dagster.stages import ASSETS, JOBS

defs = dg.Definitions(assets=ASSETS, jobs=JOBS, sensors=sensors, resources=default_resources())
