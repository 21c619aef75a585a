"""Assembles the three wings (the experiment, the loss-mask curation, the RL run report) with the
alert sensors and the resources they share; nothing else. (Dagster loads one Definitions object
from this module's scope, so the wings' own are reached through their modules.)

`definitions_for(profile, config_path, store_dir)` builds them for one profile and store, carried by
the experiment resource's fields; the workspace's `defs` is the environment's choice
(`profile.environment_choice`: `apsft ui` and `dagster dev` load this module in a process of their own)."""

import dagster as dg

from apsft_dagster.experiment import definitions as experiment
from apsft_dagster.loss_mask import definitions as loss_mask
from apsft_dagster.profile import definitions_config, environment_choice
from apsft_dagster.resources import ExperimentResource, resources_for
from apsft_dagster.run_report import definitions as run_report
from apsft_dagster.sensors import sensors

WINGS = (experiment.defs, loss_mask.defs, run_report.defs)


def definitions_for(profile: str | None = None, config_path: str | None = None, store_dir: str | None = None, *,
                    alerts: bool = True, checked: bool = True) -> dg.Definitions:
    """Every wing over the resources of one choice: `profile` (default smoke) names `configs/<profile>.yaml`,
    `config_path` (a YAML file) wins over it, `store_dir` is the store's root (None: the profile's own).

    The experiment's partitions are this process's (`profile.definitions_config`), so with `checked` the
    experiment resource refuses a run whose config is another one; `checked=False` drops that guard (tests:
    a variant of smoke keeps smoke's partitions). `alerts=False` leaves out the alert sensors."""
    experiment = ExperimentResource(profile=profile or "smoke", config_path=config_path, store_dir=store_dir,
                                    definitions_digest=definitions_config().digest if checked else None)
    return dg.Definitions.merge(*WINGS, dg.Definitions(sensors=sensors if alerts else [],
                                                       resources=resources_for(experiment)))


defs = definitions_for(*environment_choice())
