"""The reward-hacking audit's thresholds: defined in the project config (`run_report.thresholds`)."""

from apsft_dagster.core.config import HackThresholds

__all__ = ["HackThresholds"]
