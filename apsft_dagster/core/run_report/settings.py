"""The RL run report's settings: the optional `run_report` section of a profile (its models, `RunReport` and
`HackThresholds`: core/config/sections/run_report.py)."""

from __future__ import annotations

from apsft_dagster.core.config import HackThresholds, RunReport
from apsft_dagster.core.errors import ConfigError


def run_report_settings(config) -> RunReport:
    """The profile's `run_report` section; a ConfigError naming the profile when it has none."""
    if config.run_report is None:
        raise ConfigError(f"profile {config.profile}: no run_report section, which the RL run report needs; "
                          "copy the one in configs/smoke.yaml")
    return config.run_report


def hack_thresholds(config) -> HackThresholds:
    """The `run_report` section's thresholds, or the defaults when a profile has no such section
    (the experiment's generation audit reads them too)."""
    return HackThresholds() if config.run_report is None else config.run_report.thresholds
