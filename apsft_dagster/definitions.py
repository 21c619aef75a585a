"""Assembles the three wings (the experiment, the loss-mask curation, the RL run report) with the
alert sensors and the resources they share; nothing else."""

import dagster as dg

from apsft_dagster.experiment.definitions import defs as experiment
from apsft_dagster.loss_mask.definitions import defs as loss_mask
from apsft_dagster.resources import default_resources
from apsft_dagster.run_report.definitions import defs as run_report
from apsft_dagster.sensors import sensors

WINGS = (experiment, loss_mask, run_report)
defs = dg.Definitions.merge(*WINGS, dg.Definitions(sensors=sensors, resources=default_resources()))
