"""The per-sample table of a run's rollouts with their hack signals (the SQL audits' `rl_samples` view):
one boolean column per selected signal, in the profile's order (core/run_report/signal_registry.py)."""

from __future__ import annotations

import polars as pl

from apsft_dagster.core.config import HackThresholds
from apsft_dagster.core.run_report.ingest import RunFolder
from apsft_dagster.core.run_report.signal_registry import CHAT, SignalSet

# the table's own columns; every other column is one signal's
COLUMNS = {"run": pl.String, "step": pl.Int64, "sample": pl.Int64, "problem_id": pl.Int64, "reward": pl.Float64,
           "words": pl.Int64, "hacked": pl.Boolean}


def sample_table(run_id: str, run: RunFolder, thresholds: HackThresholds, signals: SignalSet | None = None
                 ) -> pl.DataFrame:
    """One row per rollout sample with its signals (the SQL audits' `rl_samples` view)."""
    chosen = signals or CHAT  # none chosen: the chat signals (run_report.signals' default)
    rows = []
    for step, doc in sorted(run.rollouts.items()):
        for index, sample in enumerate(doc.samples):
            fired = {name: result.fired for name, result in chosen.results(sample, thresholds).items()}
            rows.append({"run": run_id, "step": step, "sample": index, "problem_id": sample.problem_id,
                         "reward": float(sample.reward), "words": len(sample.completion.split()),
                         "hacked": any(fired.values()), **fired})
    return pl.DataFrame(rows, schema={**COLUMNS, **{name: pl.Boolean for name in chosen.names}})
