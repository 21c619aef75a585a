"""RL run report and reward-hacking audit: ingest a run folder, tables, hack signals, verdict, report."""

from apsft_dagster.core.config import HackThresholds
from apsft_dagster.core.run_report.hacking import hack_rates, matched_pairs
from apsft_dagster.core.run_report.ingest import RunFolder, RunReportError, load_run
from apsft_dagster.core.run_report.report import RunReport, build_report
from apsft_dagster.core.run_report.signals import hack_signals
from apsft_dagster.core.run_report.tables import (
    adapter_status,
    best_checkpoints,
    checkpoint_status,
    cost_table,
    deployability,
    eval_table,
)
from apsft_dagster.core.run_report.verdict import RULES, verdict

__all__ = [
    "RULES",
    "HackThresholds",
    "RunFolder",
    "RunReport",
    "RunReportError",
    "adapter_status",
    "best_checkpoints",
    "build_report",
    "checkpoint_status",
    "cost_table",
    "deployability",
    "eval_table",
    "hack_rates",
    "hack_signals",
    "load_run",
    "matched_pairs",
    "verdict",
]
