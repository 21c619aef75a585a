"""The parity gate: a fast instrument may score the bank only if it matches the reference.

Calibration traces are chosen from metadata alone (never scores): cells (family, level) are
visited round-robin in order and each contributes its eligible traces in the order of a seeded
hash of the trace id, until `n` traces are chosen. For each of answer likelihood, joint
likelihood, both empty baselines and both gains (mean nats per token), the metric is the max
absolute difference between the instruments over the calibration traces (the mean is recorded
beside it); the gate passes when every metric is <= the frozen threshold. Which instrument then
scores the bank, and why, is `scoring_instrument`'s one rule.
"""

from __future__ import annotations

import polars as pl

from apsft_dagster.core.errors import ParityError
from apsft_dagster.core.protocol import format_answer
from apsft_dagster.core.scoring import with_gains
from apsft_dagster.core.seeds import derive_seed
from apsft_dagster.core.text_protocol import active

METRICS = ("answer_mean", "joint_mean", "empty_answer_mean", "empty_joint_mean", "answer_gain", "joint_gain")


def calibration_traces(bank: pl.DataFrame, n: int, seed: int) -> pl.DataFrame:
    eligible = bank.filter("eligible").with_columns(
        pl.col("trace_id").map_elements(lambda t: derive_seed(seed, "calibration", t),
                                        return_dtype=pl.Int64).alias("_rank"))
    ranked = eligible.sort("family", "level", "_rank").with_columns(
        pl.int_range(pl.len()).over("family", "level").alias("_turn"))
    return ranked.sort("_turn", "family", "level").head(n).drop("_rank", "_turn")


def score_calibration(instrument, chosen: pl.DataFrame, tasks: dict[str, tuple[str, str]]) -> list[dict]:
    """Each calibration trace scored with its task's empty-thought baseline, as the bank scores it.
    `tasks`: task id -> (prompt, canonical answer)."""
    rows = []
    for r in chosen.iter_rows(named=True):
        prompt, answer = tasks[r["task_id"]]
        x, y = active().format_prompt(prompt), format_answer(answer)
        [empty, trace] = instrument.score([(x, "", y), (x, r["thought"], y)])
        rows.append(with_gains(trace, empty))
    return rows


def gate_problems(report: dict) -> list[str]:
    """The metrics over the threshold, each with its value: the check's findings."""
    return [f"{m}: {v:.6f} > {report['threshold']}" for m, v in report["metrics"].items() if v > report["threshold"]]


def parity_report(reference: list[dict], fast: list[dict], threshold: float) -> dict:
    """`metrics`: each metric's max |fast - reference| (what the gate compares with the
    threshold); `means`: its mean over the traces, kept beside it as the seed's receipt does."""
    if not reference or len(reference) != len(fast):
        raise ValueError(f"parity needs one fast score per reference score, got {len(reference)} and {len(fast)}")
    gaps = {m: [abs(r[m] - f[m]) for r, f in zip(reference, fast)] for m in METRICS}
    metrics = {m: max(g) for m, g in gaps.items()}
    worst = max(metrics, key=metrics.get)
    return {"metrics": metrics, "means": {m: sum(g) / len(g) for m, g in gaps.items()}, "threshold": threshold,
            "worst_metric": worst, "worst_value": metrics[worst],
            "passed": all(v <= threshold for v in metrics.values()), "traces": len(reference)}


def gate_finding(report: dict) -> str:
    """The gate's worst metric against its threshold, e.g. `joint_gain 0.692447 > 0.15` (six significant
    digits: a gap of 1.02e-06 against a threshold of 1e-12 reads as such, not as 0.000001)."""
    value, threshold = report["worst_value"], report["threshold"]
    return f"{report['worst_metric']} {value:.6g} {'<=' if value <= threshold else '>'} {threshold}"


def scoring_instrument(report: dict | None, config) -> tuple[str, str]:
    """(the instrument that scores the bank, why) under docs/PROTOCOL.md §6, from the gate's receipt
    (None: none yet) and the config. The reference needs no gate: a failed one is recorded and scoring
    goes on, as the registered run went on after its gate failed at 0.692 > 0.15. The fast instrument
    scores only after a passed gate; after a failed one the reference scores, or with
    `scoring.on_failed_gate: stop` a ParityError stops the run. Never the fast one after a failed gate."""
    scoring = config.scoring
    if scoring.instrument == "reference":
        if report is None or report["passed"]:
            return "reference", "reference (configured)"
        return "reference", ("reference (configured; the fast instrument failed its parity gate: "
                             f"{gate_finding(report)})")
    if report is None:
        raise ParityError("scoring.instrument is 'fast' but no parity gate receipt exists; "
                          "materialize parity_gate first")
    if report["passed"]:
        return "fast", f"fast (configured; it passed its parity gate: worst {gate_finding(report)})"
    if scoring.on_failed_gate == "stop":
        raise ParityError(
            f"parity gate failed: {report['worst_metric']} differs by {report['worst_value']:.6f} nats/token "
            f"(> {report['threshold']}); the fast instrument may not score the bank, and scoring.on_failed_gate is "
            "stop. Ways out: scoring.on_failed_gate: reference or scoring.instrument: reference, each a dated "
            "amendment (`apsft amend`); the threshold is frozen")
    return "reference", (f"reference (the fast instrument failed its parity gate: {gate_finding(report)}; "
                         "scoring.on_failed_gate: reference)")


def gate_outcome(report: dict, config) -> tuple[bool, str]:
    """(whether a failed gate stops the run, the line its check and `apsft run` show) for a gate's receipt."""
    try:
        name, reason = scoring_instrument(report, config)
    except ParityError as error:
        return True, str(error)
    if report["passed"]:
        return False, f"passed; scoring instrument: {reason}"
    return False, f"recorded: {gate_finding(report)}; scoring continues on the {name} instrument"


def verdict_scoring(report: dict, config) -> dict | None:
    """What the verdict document states about scoring after a failed gate: the instrument that scored
    the bank, why, and the gate's worst metric. None after a passed gate (the configured instrument
    scored, as the report says), so such a document keeps the bytes it had before this entry existed."""
    if report["passed"]:
        return None
    name, reason = scoring_instrument(report, config)
    return {"instrument": name, "reason": reason, "parity_gate": {
        "passed": False, "worst_metric": report["worst_metric"], "worst_value": report["worst_value"],
        "threshold": report["threshold"]}}
