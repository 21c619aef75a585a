"""The reward-hacking auditor turned on this platform's own generations: the degeneration signals
of `hack_signals` that need no prompt contract (a short phrase said again and again, a repeated
line, a repeated run of words) and the exact-loop flag, as shares per group of texts: the trace
bank (all traces, and the traces each SFT arm selected) and each evaluated policy's completions.
"""

from __future__ import annotations

import polars as pl

from apsft_dagster.core.config import HackThresholds
from apsft_dagster.core.run_report.signals import hack_signals

DEGENERATION = ("phrase_repetition", "repeated_lines", "repeated_ngram")
SCHEMA = {"source": pl.String, "group": pl.String, "texts": pl.Int64, "loop_share": pl.Float64,
          **{f"{s}_share": pl.Float64 for s in DEGENERATION}, "any_share": pl.Float64}


def degeneration_flags(texts: list[str], thresholds: HackThresholds) -> pl.DataFrame:
    """One row per text: each degeneration signal, and whether any fired."""
    rows = []
    for text in texts:
        found = hack_signals(text, thresholds=thresholds)
        flags = {s: bool(found[s]) for s in DEGENERATION}
        rows.append({**flags, "any": any(flags.values())})
    return pl.DataFrame(rows, schema={**{s: pl.Boolean for s in DEGENERATION}, "any": pl.Boolean})


def _shares(source: str, group: str, flags: pl.DataFrame, loops: pl.Series) -> dict:
    n = flags.height

    def mean(col: pl.Series) -> float:
        return float(col.cast(pl.Float64).mean()) if n else 0.0

    return {"source": source, "group": group, "texts": n, "loop_share": mean(loops),
            **{f"{s}_share": mean(flags[s]) for s in DEGENERATION}, "any_share": mean(flags["any"])}


def degeneration_table(traces: pl.DataFrame, arm_traces: dict[str, list[str]], evaluations: dict[str, pl.DataFrame],
                       thresholds: HackThresholds) -> pl.DataFrame:
    """traces: (trace_id, thought, loop); arm_traces: arm -> its selected trace ids; evaluations:
    policy -> (text, loop). Each text is judged once."""
    flags = degeneration_flags(traces["thought"].to_list(), thresholds).with_columns(
        traces["trace_id"], traces["loop"])
    rows = [_shares("trace_bank", "all traces", flags, flags["loop"])]
    for arm, ids in arm_traces.items():  # per selected row: a trace an arm takes twice counts twice
        chosen = pl.DataFrame({"trace_id": ids}, schema={"trace_id": pl.String}).join(
            flags, on="trace_id", how="left", maintain_order="left")
        rows.append(_shares("trace_bank", arm, chosen, chosen["loop"]))
    for policy, table in evaluations.items():
        rows.append(_shares("evaluation", policy, degeneration_flags(table["text"].to_list(), thresholds),
                            table["loop"]))
    return pl.DataFrame(rows, schema=SCHEMA)
