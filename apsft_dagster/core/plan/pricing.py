"""A stage's work priced in device-hours, the budget gate's verdict, and the total lines.

Hours = units / rate: the expected units where known, else the upper bound (the row says which);
low at the rate's high end, high at its low end. Training rows get the budget gate's verdict: the
matrix the gate prices (Stage A's six policies, plus the replication policies in Stage B's run)
against `training.budget_device_hours`, or the latest budget amendment valid for this selection
(`core/training/gate.py`'s `budget_amendment`, read by observed.py). The gate itself decides on
a warm-up's measured throughput, so a range across the budget is left for it to decide.
"""

from __future__ import annotations

from apsft_dagster.core.plan import registered
from apsft_dagster.core.plan.rates import Rate, tokens_rate
from apsft_dagster.core.plan.stages import Stage

NO_BUDGET = "no registered budget"


def fmt_hours(h: float) -> str:
    """1 decimal from an hour up, else 2 significant figures."""
    if h >= 1:
        return f"{h:.1f}"
    return "0" if h == 0 else ("<0.001" if h < 0.001 else f"{h:.2g}")


def _basis(parts) -> str:
    kinds = {"expected" if p.expected is not None else "upper bound" for p in parts}
    return " + ".join(sorted(kinds)) if kinds else "expected"


def _sum(values):
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def price(stage: Stage, rates: dict[str, Rate]) -> dict:
    """The stage's row: tokens, throughput and device-hours (None where a rate is not declared)."""
    low = high = 0.0
    texts, sources, missing = [], [], []
    for part in stage.parts:
        rate = rates.get(part.rate)
        if rate is None:
            missing.append(part.rate)
            continue
        units = part.expected if part.expected is not None else part.upper
        low, high = low + units / rate.high / 3600, high + units / rate.low / 3600
        texts.append(f"{part.label} {rate.text}".strip() if len(stage.parts) > 1 else rate.text)
        sources.append(rate.source)
    notes = [*stage.notes, *(f"not priced: no {m} envelope in the profile (plan.{m}_seconds)" for m in missing)]
    return {"kind": "stage", "key": stage.key, "stage": stage.name, "work": stage.work, "counts": stage.counts,
            "tokens_upper": sum(p.tokens_upper for p in stage.parts),
            "tokens_expected": _sum(p.tokens_expected for p in stage.parts), "expected_from": stage.expected_from,
            "throughput": " + ".join(texts) or "-", "throughput_source": "; ".join(dict.fromkeys(sources)) or "-",
            "hours_low": None if missing else low, "hours_high": None if missing else high,
            "hours_basis": _basis(stage.parts), "done": stage.done, "conditional": stage.conditional,
            "budget": NO_BUDGET, "notes": notes,
            "partitions": stage.partitions, "partition": stage.partition, "loads": stage.loads}


def verdict(tokens: float, rate: Rate, budget: float, upper: bool = False) -> str:
    """The budget gate's answer for `tokens` forward tokens at `rate`, as far as a plan can tell
    (`upper`: the tokens are the upper bound, so only "within" is certain)."""
    low, high, b = tokens / rate.high / 3600, tokens / rate.low / 3600, fmt_hours(budget)
    if high <= budget:
        return f"within budget ({b} h)"
    if upper:
        return f"over budget ({b} h) at the upper bound"
    if low > budget:
        return f"over budget ({b} h): training stops until `apsft amend`"
    return f"within budget ({b} h) only above {tokens / (budget * 3600):,.0f} tok/s"


def budget_of(config, amendment: dict | None) -> tuple[float, str]:
    if amendment is not None:
        return amendment["budget_device_hours"], f"amendment {amendment['seq']} of {amendment['date']}"
    return config.training.budget_device_hours, "training.budget_device_hours"


def gate_tokens(row: dict) -> int:
    return row["tokens_expected"] if row["tokens_expected"] is not None else row["tokens_upper"]


def add_budgets(rows: list[dict], rate: Rate, budget: float, source: str) -> None:
    """The verdict on each training row: Stage A's matrix, then it with the replication policies."""
    matrix, upper = 0, False
    for row in rows:
        if row["key"] in ("training", "stage_b_training"):
            matrix, upper = matrix + gate_tokens(row), upper or row["tokens_expected"] is None
            row["budget"] = verdict(matrix, rate, budget, upper)
            what = "Stage A's matrix" if row["key"] == "training" else "Stage A's matrix and these policies"
            row["notes"].append(f"budget gate: {what}, {matrix:,} forward tokens, against {fmt_hours(budget)} h "
                                f"({source}); it decides on a warm-up's measured tokens/s (the envelope's low end "
                                "with training.warmup_records 0)" + ("; the upper bound counts every record at its "
                                                                     "cap: the manifest's forward tokens decide"
                                                                     if upper and "over" in row["budget"] else ""))


def _total(name: str, rows: list[dict], share: bool = False) -> dict:
    def hours(key: str):
        values = [r[key] * ((1 - (r["done"] or 0)) if share else 1) for r in rows if r[key] is not None]
        return sum(values)
    unpriced = [r["stage"] for r in rows if r["hours_low"] is None]
    bases = {r["hours_basis"] for r in rows if r["hours_low"] is not None}
    return {"kind": "total", "key": name.replace(" ", "_").replace(",", ""), "stage": name, "work": None,
            "counts": None, "tokens_upper": None if share else sum(r["tokens_upper"] for r in rows),
            "tokens_expected": None if share else _sum(r["tokens_expected"] for r in rows), "expected_from": None,
            "throughput": None,
            "throughput_source": None, "hours_low": hours("hours_low"), "hours_high": hours("hours_high"),
            "hours_basis": "expected" if bases == {"expected"} else "mixed", "done": None, "conditional": False,
            "budget": None, "notes": [f"not priced: {', '.join(unpriced)}"] if unpriced else []}


def totals(rows: list[dict]) -> list[dict]:
    """The Stage A path, the whole run with Stage B, and what is still to run when the store holds some."""
    path = [r for r in rows if not r["conditional"]]
    out = [_total("total, Stage A path", path), _total("total with Stage B", rows)]
    if any(r["done"] for r in rows):
        out.append(_total("still to run, Stage A path", path, share=True))
    return out


def registered_row(config, budget: float) -> dict:
    """The registered matrix at the registered envelope: the estimate the registered run stopped on."""
    env = registered.ENVELOPE_TOKENS_PER_S
    rate = tokens_rate(env["low"], env["high"], "registered envelope (docs/PROTOCOL.md §10)")
    low, high = registered.matrix_hours(envelope=env)
    tokens = registered.MATRIX_FORWARD_TOKENS
    return {"kind": "registered", "key": "registered_matrix", "stage": "registered matrix (§10)",
            "work": f"{len(registered.FORWARD_TOKENS)} arms x {registered.ROWS_PER_ARM} rows x "
                    f"{config.training.epochs} epochs, as the registered manifest counted them",
            "counts": "registered run", "tokens_upper": tokens, "tokens_expected": tokens,
            "expected_from": "registered run", "throughput": rate.text, "throughput_source": rate.source,
            "hours_low": low, "hours_high": high, "hours_basis": "expected", "done": None, "conditional": False,
            "budget": verdict(tokens, rate, budget),
            "notes": [f"the registered run's own estimate, {tokens:,} forward tokens at about {rate.text} on its GPU, "
                      "exceeded its budget: it stopped before training"]}
