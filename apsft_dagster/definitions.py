"""Assembles the three wings (the experiment, the loss-mask curation, the RL run report) with the
alert sensors and the resources they share; nothing else. (Dagster loads one Definitions object
from this module's scope, so the wings' own are reached through their modules.)"""

import dagster as dg

from apsft_dagster.experiment import definitions as experiment
from apsft_dagster.loss_mask import definitions as loss_mask
from apsft_dagster.resources import default_resources
from apsft_dagster.run_report import definitions as run_report
from apsft_dagster.sensors import sensors

WINGS = (experiment.defs, loss_mask.defs, run_report.defs)
defs = dg.Definitions.merge(*WINGS, dg.Definitions(sensors=sensors, resources=default_resources()))
