"""The census: what the rules would mask, measured in one streaming pass (never writes the data).

Per source and in total: rows, assistant turns, per-reason turn counts, the union of masked
turns, rows touched, every combination of reasons with its count, and the left-alone counts.
Memory holds counters only (sources x combinations), so it does not grow with the file.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable

from apsft_dagster.core.loss_mask.rules import LossMaskError, judge_row

FIELDS = ("rows", "assistant_turns", "masked_turns", "rows_touched")


def census(lines: Iterable[bytes | str], *, known_broken_families: frozenset[str] = frozenset(),
           prose_commands: frozenset[str] | None = None, source_name: str = "<lines>", first_line: int = 1) -> dict:
    """Count over JSON lines (blank lines skipped); a line that is not JSON raises naming its number
    (`first_line`: the number of the first line given, when they are a range of a larger file)."""
    known_broken_families = frozenset(known_broken_families)
    tallies: dict[str, dict] = {}
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LossMaskError(f"{source_name} line {number}: not JSON ({exc.msg}); fix or drop the line") from None
        flags, kept = judge_row(row, known_broken_families=known_broken_families, prose_commands=prose_commands)
        source = str(row.get("source"))
        tally = tallies.get(source)
        if tally is None:
            tally = tallies[source] = _empty()
        _add(tally, row, flags, kept)
    return _result(tallies)


def merge_census(parts: Iterable[dict]) -> dict:
    """One census from the censuses of consecutive ranges of a file (counts add up)."""
    tallies: dict[str, dict] = {}
    for part in parts:
        for source, plain in part["by_source"].items():
            tally = tallies.setdefault(source, _empty())
            for key in FIELDS:
                tally[key] += plain[key]
            for key in ("reasons", "combinations", "left_alone"):
                tally[key].update(plain[key])
    return _result(tallies)


def _result(tallies: dict[str, dict]) -> dict:
    total = _empty()
    for tally in tallies.values():
        for key in FIELDS:
            total[key] += tally[key]
        for key in ("reasons", "combinations", "left_alone"):
            total[key].update(tally[key])
    return {"total": _plain(total), "by_source": {s: _plain(t) for s, t in sorted(tallies.items())}}


def _empty() -> dict:
    return {**dict.fromkeys(FIELDS, 0), "reasons": Counter(), "combinations": Counter(), "left_alone": Counter()}


def _add(tally: dict, row: dict, flags: dict[int, frozenset[str]], kept: dict[int, frozenset[str]]) -> None:
    tally["rows"] += 1
    tally["assistant_turns"] += sum(m.get("role") == "assistant" for m in row["messages"])
    tally["masked_turns"] += len(flags)
    tally["rows_touched"] += bool(flags)
    for reasons in flags.values():
        tally["reasons"].update(reasons)
        tally["combinations"]["+".join(sorted(reasons))] += 1
    for labels in kept.values():
        tally["left_alone"].update(labels)


def _plain(tally: dict) -> dict:
    """JSON-ready with a fixed key order, so a census file is byte-identical across runs."""
    return {**{k: tally[k] for k in FIELDS},
            **{k: dict(sorted(tally[k].items())) for k in ("reasons", "combinations", "left_alone")}}
