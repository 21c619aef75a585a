"""The verdict line, derived by rules (never typed): the first rule whose condition holds fires.

Facts: a metric *rose* when its value at the last step that has one beats its value at the
first such step (in the metric's direction); the hack rate *rose* when the last saved rollout
step's rate exceeds the first's by more than `hack_rate_rise`; hacking is *present* when the
last step's rate exceeds `production_max_hack_rate`.

Rules, in order:
1. no_metric_gain              no eval metric rose                    -> "not useful: no eval metric rose"
2. mixed_metrics               some rose, some did not                -> "mixed result: read the eval table"
3. metric_up_not_audited       all rose, no rollout samples           -> "useful checkpoint, hacking not audited"
4. metric_up_hack_rate_up      all rose, hack rate rose               -> "useful checkpoint, not production"
5. metric_up_hacking_present   all rose, hacking present              -> "useful checkpoint, not production"
6. metric_up_best_not_ready    all rose, clean, a best step not deployable -> "production candidate, not yet deployable"
7. metric_up_deployability_not_recorded  all rose, clean, a best step's deployability not recorded
                                      -> "production candidate, deployability not recorded"
8. metric_up_clean             otherwise                              -> "production candidate"

A section the source did not record is read as unknown: no rollouts is rule 3 (not audited);
rule 6 needs a recorded "not deployable" (a checkpoint or adapter missing or not READY); a best
step whose checkpoint, adapter or deployability is not recorded is neither deployable nor not
deployable, so rule 7 stops the run short of "production candidate" and says why.
"""

from __future__ import annotations

from apsft_dagster.core.config import HackThresholds
from apsft_dagster.core.run_report.hacking import hack_rates
from apsft_dagster.core.run_report.ingest import RunFolder
from apsft_dagster.core.run_report.tables import best_checkpoints, eval_table

RULES = (
    ("no_metric_gain", lambda f: not f["rose"], "not useful: no eval metric rose"),
    ("mixed_metrics", lambda f: bool(f["not_rose"]), "mixed result: read the eval table"),
    ("metric_up_not_audited", lambda f: f["last_rate"] is None, "useful checkpoint, hacking not audited"),
    ("metric_up_hack_rate_up", lambda f: f["rate_rose"], "useful checkpoint, not production"),
    ("metric_up_hacking_present", lambda f: f["hacking_present"], "useful checkpoint, not production"),
    ("metric_up_best_not_ready", lambda f: bool(f["not_ready"]), "production candidate, not yet deployable"),
    ("metric_up_deployability_not_recorded", lambda f: bool(f["ready_unknown"]),
     "production candidate, deployability not recorded"),
    ("metric_up_clean", lambda f: True, "production candidate"),
)


def _metric_moves(run: RunFolder) -> tuple[list[str], list[str], list[str]]:
    """(labels that rose, labels that did not, 'label first -> last' phrases)."""
    rows = eval_table(run)
    rose, not_rose, moves = [], [], []
    for metric in run.evals.metrics:
        series = [(r["step"], r["scores"][metric.key]) for r in rows if r["scores"][metric.key] is not None]
        if not series:
            not_rose.append(metric.label)
            moves.append(f"{metric.label} has no values")
            continue
        (first_step, first), (last_step, last) = series[0], series[-1]
        up = last > first if metric.higher_is_better else last < first
        (rose if up else not_rose).append(metric.label)
        moves.append(f"{metric.label} {first:.4f} (step {first_step}) -> {last:.4f} (step {last_step})")
    return rose, not_rose, moves


def facts(run: RunFolder, thresholds: HackThresholds | None = None, signals=None) -> dict:
    """What the rules read: metric moves, first/last hack rate, best steps that are not deployable."""
    t = thresholds or HackThresholds()
    rose, not_rose, moves = _metric_moves(run)
    rates = hack_rates(run, t, signals)  # signals: a signal_registry.SignalSet (None: the chat signals)
    first_rate = rates[0]["rate"] if rates else None
    last_rate = rates[-1]["rate"] if rates else None
    best = [b for b in best_checkpoints(run) if b["step"] is not None]
    not_ready = {b["step"] for b in best if b["deployable"] is False}
    ready_unknown = {b["step"] for b in best if b["deployable"] is None}
    return {"rose": rose, "not_rose": not_rose, "moves": moves,
            "rate_steps": [r["step"] for r in rates], "first_rate": first_rate, "last_rate": last_rate,
            "rate_rose": len(rates) > 1 and last_rate - first_rate > t.hack_rate_rise,
            "hacking_present": last_rate is not None and last_rate > t.production_max_hack_rate,
            "not_ready": sorted(not_ready), "ready_unknown": sorted(ready_unknown)}


def _because(f: dict) -> str:
    parts = ["; ".join(f["moves"])]
    if f["last_rate"] is not None:
        steps = f["rate_steps"]
        parts.append(f"hack rate {f['first_rate']:.2%} (step {steps[0]}) -> {f['last_rate']:.2%} (step {steps[-1]})")
    if f["not_ready"]:
        parts.append("best step(s) not deployable: " + ", ".join(str(s) for s in f["not_ready"]))
    if f["ready_unknown"]:
        parts.append("deployability not recorded for best step(s): " + ", ".join(str(s) for s in f["ready_unknown"]))
    return "; ".join(parts)


def verdict(run: RunFolder, thresholds: HackThresholds | None = None, signals=None) -> dict:
    """{rule, verdict, because}: the first rule of RULES that holds, and the facts it read, in words."""
    f = facts(run, thresholds, signals)
    rule, _, text = next(r for r in RULES if r[1](f))
    return {"rule": rule, "verdict": text, "because": _because(f)}
