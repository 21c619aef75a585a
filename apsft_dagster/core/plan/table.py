"""The plan as an aligned plain-text table: one line per stage with its work beneath, the totals,
the registered matrix where it applies, then the notes (each throughput's source among them)."""

from __future__ import annotations

from apsft_dagster.core.plan.pricing import fmt_hours

COLUMNS = ("stage", "counts", "upper tokens", "expected tokens", "throughput", "device-hours", "budget")
RIGHT = {"upper tokens", "expected tokens"}
BASIS = {"expected": "expected", "upper bound": "upper", "expected + upper bound": "exp+upper", "mixed": "mixed"}


def _tokens(n) -> str:
    return "-" if n is None else f"{n:,.0f}"


def hours_cell(row: dict) -> str:
    if row["hours_low"] is None:
        return "not priced"
    low, high = fmt_hours(row["hours_low"]), fmt_hours(row["hours_high"])
    text = low if low == high else f"{low}-{high}"
    basis = BASIS.get(row["hours_basis"])
    return f"{text} ({basis})" if basis else text


def _tag(source: str) -> str:
    kinds = {part.split(" ", 1)[0] for part in source.split("; ")}
    return "+".join(sorted(kinds))


def cells(row: dict) -> dict[str, str]:
    stage = row["stage"]
    if row["done"]:
        stage += f" [{row['done']:.0%} done]"
    throughput = row["throughput"] or ""
    if throughput and throughput != "-":
        throughput += f" ({_tag(row['throughput_source'])})"
    return {"stage": stage, "counts": row["counts"] or "", "upper tokens": _tokens(row["tokens_upper"]),
            "expected tokens": _tokens(row["tokens_expected"]),
            "throughput": throughput, "device-hours": hours_cell(row), "budget": row["budget"] or ""}


def _line(values: dict[str, str], widths: dict[str, int]) -> str:
    return "  ".join(values[c].rjust(widths[c]) if c in RIGHT else values[c].ljust(widths[c])
                     for c in COLUMNS).rstrip()


def render(rows: list[dict], notes: list[str] = ()) -> str:
    """The table, then the notes: the caller's, each row's, and every throughput's source."""
    table = [cells(r) for r in rows]
    widths = {c: max(len(c), *(len(t[c]) for t in table)) for c in COLUMNS}
    rule = "-" * sum(widths[c] + 2 for c in COLUMNS)
    out = [_line({c: c for c in COLUMNS}, widths), rule]
    condition_shown = False
    for row, values in zip(rows, table):
        if row["kind"] == "stage" and row["conditional"] and not condition_shown:
            out.append("-- Stage B, only if Stage A triggers " + "-" * 40)
            condition_shown = True
        if row["kind"] != "stage" and rows.index(row) and rows[rows.index(row) - 1]["kind"] == "stage":
            out.append(rule)
        out.append(_line(values, widths))
        if row["work"]:
            out.append(f"    work: {row['work']}" + (f"; expected from: {row['expected_from']}"
                                                     if row["expected_from"] else ""))
    sources = list(dict.fromkeys(s for r in rows for s in (r["throughput_source"] or "-").split("; ") if s != "-"))
    notes = [*notes, *(f"{r['stage']}: {n}" for r in rows for n in r["notes"]),
             *(f"throughput: {s}" for s in sources)]
    if any(r["hours_basis"] != "expected" for r in rows if r["kind"] == "stage"):
        notes.append("device-hours: of the expected tokens where known, else of the upper bound (upper); a total "
                     "adds both (mixed)")
    return "\n".join([*out, "", "notes:", *(f"  - {n}" for n in notes)]) + "\n"


MEMORY_COLUMNS = ("stage", "resident (outside vLLM)", "vLLM start needs free", "largest step", "left", "fits")


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / (1 << 30):.2f} GiB"


def render_memory(rows: list[dict], device: str, notes: list[str] = ()) -> str:
    """The memory plan's table (core/plan/memory.py): one line per engine stage, then its notes."""
    table = [{"stage": r["stage"], "resident (outside vLLM)": r["resident"], "vLLM start needs free":
              _gib(r["vllm_bytes"]), "largest step": f"{r['step']}: {_gib(r['step_bytes'])}" if r["step_bytes"]
              else r["step"], "left": _gib(r["free_bytes"]), "fits": "yes" if r["fits"] else "NO"} for r in rows]
    widths = {c: max(len(c), *(len(t[c]) for t in table)) for c in MEMORY_COLUMNS}

    def line(values: dict[str, str]) -> str:
        return "  ".join(values[c].ljust(widths[c]) for c in MEMORY_COLUMNS).rstrip()

    out = [f"memory on {device}:", line({c: c for c in MEMORY_COLUMNS}),
           "-" * sum(widths[c] + 2 for c in MEMORY_COLUMNS), *(line(t) for t in table)]
    return "\n".join([*out, "", "memory notes:", *(f"  - {n}" for n in notes)]) + "\n"
