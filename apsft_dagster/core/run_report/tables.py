"""The report's tables and choices: eval scores by step, best checkpoint per metric, cost, statuses.

Best checkpoint per metric: the step with the best value (highest, or lowest when the metric says
higher_is_better = false) among the steps that have a value. A missing value leaves its step
out and is said so; a tie goes to the earliest tied step (the fewest updates away from the
base) and is said so. A best step is deployable only when its checkpoint is READY and its
adapter is READY and deployable; otherwise the entry says why not.

A section the source does not record is read as unknown, never as a no: deployability is None
("not recorded") when the run has no checkpoint or adapter record, or a READY adapter whose
deployability is not recorded; it is False only on a recorded fact (a missing or unready
checkpoint or adapter). The cost table is None when usage is not recorded.
"""

from __future__ import annotations

from decimal import Decimal

from apsft_dagster.core.run_report.ingest import RunFolder

READY = "READY"


def _steps(steps: list[int]) -> str:
    text = [str(s) for s in steps]
    return text[0] if len(text) == 1 else ", ".join(text[:-1]) + " and " + text[-1]


def eval_table(run: RunFolder) -> list[dict]:
    """One row per eval step: {step, scores: {metric key: value | None}, train_reward: value | None}."""
    rewards = {r.step: r.reward_mean for r in run.train_reward.steps} if run.train_reward else {}
    keys = [m.key for m in run.evals.metrics]
    return [{"step": e.step, "scores": {k: e.scores.get(k) for k in keys}, "train_reward": rewards.get(e.step)}
            for e in sorted(run.evals.steps, key=lambda e: e.step)]


def _checkpoint(run: RunFolder, step: int):
    return next((c for c in run.checkpoints.checkpoints if c.step == step), None) if run.checkpoints else None


def _adapter(run: RunFolder, step: int):
    return next((a for a in run.adapters.adapters if a.step == step), None) if run.adapters else None


def deployability(run: RunFolder, step: int) -> tuple[bool | None, str]:
    """Whether a step's checkpoint and adapter are usable now (None: not recorded), and the words saying why."""
    ckpt, adapter = _checkpoint(run, step), _adapter(run, step)
    if run.checkpoints is None:
        return None, "deployability not recorded: the run has no checkpoint record"
    if ckpt is None:
        base = " (the base model)" if step == 0 else ""
        return False, f"not deployable: step {step} has no saved checkpoint{base}"
    if ckpt.status != READY:
        return False, f"not yet deployable: checkpoint {ckpt.id} is {ckpt.status} (only {READY} checkpoints are usable)"
    if run.adapters is None:
        return None, f"checkpoint {ckpt.id} is {READY}; deployability not recorded: the run has no adapter record"
    if adapter is None:
        return False, f"not deployable: step {step} has no adapter"
    if adapter.status == READY and adapter.deployable is None:
        return None, f"checkpoint {ckpt.id} and adapter {adapter.id} are {READY}; deployability not recorded"
    if adapter.status != READY or not adapter.deployable:
        return False, (f"not yet deployable: adapter {adapter.id} is {adapter.status}, "
                       f"deployable={adapter.deployable}")
    return True, f"deployable: checkpoint {ckpt.id} and adapter {adapter.id} are {READY}"


def _best_entry(run: RunFolder, metric, rows: list[dict]) -> dict:
    values = {r["step"]: r["scores"][metric.key] for r in rows}
    missing = [s for s, v in values.items() if v is None]
    present = {s: v for s, v in values.items() if v is not None}
    notes = [f"no value at step {_steps(missing)}, left out"] if missing else []
    if not present:
        return {"metric": metric.key, "label": metric.label, "step": None, "value": None, "tied_steps": [],
                "missing_steps": missing, "checkpoint_id": None, "adapter_id": None, "deployable": False,
                "explanation": "; ".join(notes + ["no step has a value, so there is no best checkpoint"])}
    best_value = max(present.values()) if metric.higher_is_better else min(present.values())
    tied = [s for s, v in present.items() if v == best_value]
    step = tied[0]
    if len(tied) > 1:
        notes.append(f"steps {_steps(tied)} tie at {best_value:.4f}; the earliest, step {step}, is chosen")
    deployable, why = deployability(run, step)
    ckpt, adapter = _checkpoint(run, step), _adapter(run, step)
    return {"metric": metric.key, "label": metric.label, "step": step, "value": best_value, "tied_steps": tied,
            "missing_steps": missing, "checkpoint_id": ckpt and ckpt.id, "adapter_id": adapter and adapter.id,
            "deployable": deployable,
            "explanation": "; ".join(notes + [why])}


def best_checkpoints(run: RunFolder) -> list[dict]:
    """Per metric, in declared order: the best step, its ids, ties, missing steps and deployability in words."""
    rows = eval_table(run)
    return [_best_entry(run, metric, rows) for metric in run.evals.metrics]


def cost_table(run: RunFolder) -> dict | None:
    """{rows: [{kind, tokens, cost_usd}], total_tokens, total_cost_usd}; costs are exact Decimals; None: not
    recorded."""
    if run.usage is None:
        return None
    rows = [{"kind": u.kind, "tokens": u.tokens, "cost_usd": u.cost_usd} for u in run.usage.usage]
    return {"rows": rows, "total_tokens": sum(r["tokens"] for r in rows),
            "total_cost_usd": sum((r["cost_usd"] for r in rows), Decimal(0))}


def checkpoint_status(run: RunFolder) -> list[dict] | None:
    """Checkpoints by step: {step, id, status, size_bytes, usable}; usable means READY; None: not recorded."""
    if run.checkpoints is None:
        return None
    return [{"step": c.step, "id": c.id, "status": c.status, "size_bytes": c.size_bytes, "usable": c.status == READY}
            for c in sorted(run.checkpoints.checkpoints, key=lambda c: c.step)]


def adapter_status(run: RunFolder) -> list[dict] | None:
    """Adapters, stepless first then by step: {step, id, status, deployment_status, deployable} (None: not
    recorded); None when the run has no adapter record."""
    if run.adapters is None:
        return None
    ordered = sorted(run.adapters.adapters, key=lambda a: (a.step is not None, a.step or 0))
    return [a.model_dump() for a in ordered]
