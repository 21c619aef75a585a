"""The plan as an aligned plain-text table: one line per stage with its work beneath, the totals,
the registered matrix where it applies, then the notes (each throughput's source among them)."""

from __future__ import annotations

from apsft_dagster.core.plan.pricing import fmt_hours
from apsft_dagster.core.plan.stage_b_work import CONDITION

COLUMNS = ("stage", "counts", "upper tokens", "expected tokens", "throughput", "device-hours", "budget")
WALL = "wall hours"  # shown before "budget" when the plan is priced on N devices
PLURAL = {"policy": "policies"}
RIGHT = {"upper tokens", "expected tokens"}
BASIS = {"expected": "expected", "upper bound": "upper", "expected + upper bound": "exp+upper", "mixed": "mixed"}


def _devices(n: int) -> str:
    return f"{n} device" + ("" if n == 1 else "s")


def _tokens(n) -> str:
    return "-" if n is None else f"{n:,.0f}"


def _range(low: float, high: float) -> str:
    low, high = fmt_hours(low), fmt_hours(high)
    return low if low == high else f"{low}-{high}"


def hours_cell(row: dict) -> str:
    if row["hours_low"] is None:
        return "not priced"
    text = _range(row["hours_low"], row["hours_high"])
    basis = BASIS.get(row["hours_basis"])
    return f"{text} ({basis})" if basis else text


def _tag(source: str) -> str:
    kinds = {part.split(" ", 1)[0] for part in source.split("; ")}
    return "+".join(sorted(kinds))


def wall_cell(row: dict) -> str:
    """The wall hours on the plan's devices, and the partitions they spread (core/plan/wall.py)."""
    if row.get("wall_low") is None:
        return "not priced" if row["kind"] == "stage" and row["hours_low"] is None else ""
    text = _range(row["wall_low"], row["wall_high"])
    n = len(row.get("partitions") or ())
    what = row.get("partition")
    if not what:
        return text
    return f"{text} ({n:,} {what if n == 1 else PLURAL.get(what, what + 's')})"


def cells(row: dict) -> dict[str, str]:
    stage = row["stage"]
    if row["done"]:
        stage += f" [{row['done']:.0%} done]"
    throughput = row["throughput"] or ""
    if throughput and throughput != "-":
        throughput += f" ({_tag(row['throughput_source'])})"
    return {"stage": stage, "counts": row["counts"] or "", "upper tokens": _tokens(row["tokens_upper"]),
            "expected tokens": _tokens(row["tokens_expected"]),
            "throughput": throughput, "device-hours": hours_cell(row), WALL: wall_cell(row),
            "budget": row["budget"] or ""}


def _line(values: dict[str, str], widths: dict[str, int]) -> str:
    return "  ".join(values[c].rjust(widths[c]) if c in RIGHT else values[c].ljust(widths[c])
                     for c in widths).rstrip()


def render(rows: list[dict], notes: list[str] = (), devices: int | None = None) -> str:
    """The table, then the notes: the caller's, each row's, and every throughput's source. With
    `devices` (rows priced by core/plan/wall.py `add_walls`), each row's wall hours on them too."""
    columns = COLUMNS if devices is None else (*COLUMNS[:-1], WALL, COLUMNS[-1])
    heads = {c: c for c in columns} | ({WALL: f"wall hours, {_devices(devices)}"} if devices else {})
    table = [cells(r) for r in rows]
    widths = {c: max(len(heads[c]), *(len(t[c]) for t in table)) for c in columns}
    rule = "-" * sum(widths[c] + 2 for c in columns)
    out = [_line(heads, widths), rule]
    condition_shown = False
    for row, values in zip(rows, table):
        if row["kind"] == "stage" and row["conditional"] and not condition_shown:
            out.append(f"-- {CONDITION} " + "-" * 40)
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


def render_devices(totals: list[dict]) -> str:
    """Stage A's total on each device count (core/plan/wall.py `stage_a_by_devices`)."""
    heads = ("devices", "wall hours", "device-hours busy", "device-hours held")
    table = [(str(t["devices"]), _range(t["wall_low"], t["wall_high"]), _range(t["busy_low"], t["busy_high"]),
              _range(t["devices"] * t["wall_low"], t["devices"] * t["wall_high"])) for t in totals]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(heads)]

    def line(values) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()

    return "\n".join(["Stage A path by devices (stages one after another; busy: the work and every model load; "
                      "held: devices x wall):", line(heads), "-" * sum(w + 2 for w in widths),
                      *(line(t) for t in table)]) + "\n"
