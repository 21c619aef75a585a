"""The post-run filter (`apsft rl-report filter RUN`): a registered run's rollouts that no selected
hack signal flags, as JSON lines, with the counts dropped per signal.

Kept samples are written in the run's order (saved step ascending, then as listed in the step's
file), one JSON object per line with the keys step, problem_id, prompt, completion, reward (UTF-8,
no key sorting, no whitespace variation), so equal inputs give identical bytes. A sample flagged by
two signals counts under both in `dropped_by_signal`, once in `dropped`.
"""

from __future__ import annotations

import json
from pathlib import Path

from apsft_dagster.core.config import HackThresholds
from apsft_dagster.core.run_report.ingest import RunFolder, RunReportError, load_run
from apsft_dagster.core.run_report.names import rl_file
from apsft_dagster.core.run_report.registry import check_unchanged, registered
from apsft_dagster.core.run_report.signal_registry import SignalSet
from apsft_dagster.core.store import Store, json_bytes, sha256_bytes, write_atomic

KEPT = "filtered.jsonl"
COUNTS = "filter.json"  # written beside the kept rollouts


def filter_rollouts(run: RunFolder, signals: SignalSet, thresholds: HackThresholds) -> tuple[bytes, dict]:
    """(the kept samples as JSON lines, {signals, samples, kept, dropped, dropped_by_signal})."""
    lines, dropped_by = [], dict.fromkeys(signals.names, 0)
    samples = dropped = 0
    for step, doc in sorted(run.rollouts.items()):
        for sample in doc.samples:
            samples += 1
            fired = [name for name, result in signals.results(sample, thresholds).items() if result.fired]
            for name in fired:
                dropped_by[name] += 1
            if fired:
                dropped += 1
                continue
            row = {"step": step, "problem_id": sample.problem_id, "prompt": sample.prompt,
                   "completion": sample.completion, "reward": float(sample.reward)}
            lines.append(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
    counts = {"signals": list(signals.names), "samples": samples, "kept": samples - dropped, "dropped": dropped,
              "dropped_by_signal": dropped_by}
    return "".join(lines).encode(), counts


def export_filtered(store: Store, run_id: str, signals: SignalSet, thresholds: HackThresholds,
                    out: str | Path | None = None) -> dict | None:
    """Filter registered run `run_id` and write the kept rollouts (`out`, else the store's
    run_report/<run>/filtered.jsonl) and filter.json beside them, atomically, after every check.
    None (nothing written) when the run saved no rollouts."""
    record = registered(store, run_id)
    run = load_run(record["folder"])
    check_unchanged(record, run)
    if not run.rollouts:
        return None
    if out is not None and Path(out).name == COUNTS:
        raise RunReportError(f"--out {out}: {COUNTS} is the counts' name, written beside the export; "
                             "name the export something else, e.g. kept.jsonl")
    if out is not None and Path(out).is_dir():
        raise RunReportError(f"--out {out}: is a folder; give a file path, e.g. {Path(out) / KEPT}")
    data, counts = filter_rollouts(run, signals, thresholds)
    kept_path = Path(out).resolve() if out is not None else store.path(rl_file(run_id, KEPT))
    summary = {"run": run_id, "inputs": run.sha256, **counts, "export": kept_path.name,
               "export_sha256": sha256_bytes(data)}
    if out is None:
        store.put_bytes(rl_file(run_id, KEPT), data)
        store.put_json(rl_file(run_id, COUNTS), summary)
    else:
        kept_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(kept_path, data)
        write_atomic(kept_path.with_name(COUNTS), json_bytes(summary))
    return {**summary, "export_path": str(kept_path), "counts_path": str(kept_path.with_name(COUNTS))}
