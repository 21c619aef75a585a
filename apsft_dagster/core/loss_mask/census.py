"""The census: what the rules would mask, measured in one streaming pass (never writes the data).

Per source and in total: rows, assistant turns, per-reason turn counts, the union of masked
turns, rows touched, every combination of reasons with its count, and the left-alone counts.
Memory holds counters only (sources x combinations), so it does not grow with the file. A row
adds to one counter per distinct set of reasons; per-reason totals and the combination names
are derived from those sets once, at the end.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import polars as pl

from apsft_dagster.core.json_input import parse_json
from apsft_dagster.core.loss_mask.formats import canonical_row, row_id_source
from apsft_dagster.core.loss_mask.rules import LossMaskError, judge_row, rules_run

FIELDS = ("rows", "assistant_turns", "masked_turns", "rows_touched")
# rule -> rows it ran on / rows it could not run on (no harness or verifier); where row ids came from
KINDS = ("reasons", "combinations", "left_alone", "ran", "skipped", "row_ids")


def census(lines: Iterable[bytes | str], *, known_broken_families: frozenset[str] = frozenset(),
           prose_commands: frozenset[str] | None = None, source_name: str = "<lines>", first_line: int = 1,
           fmt: str = "native") -> dict:
    """Count over JSON lines (blank lines skipped) in format `fmt` (formats/); a line that is not strict
    JSON (core/json_input.py) or not a row the rules can read raises naming the source, its line
    number and the field (`first_line`: the number of the first line given, when they are a range of
    a larger file). Per rule, the rows it ran on and the rows it was skipped on (`ran`, `skipped`);
    `row_ids`: how many rows took their id from `row_id`, `id` or their line number."""
    known_broken_families = frozenset(known_broken_families)
    tallies: dict[str, _Tally] = {}
    for number, line in enumerate(lines, start=first_line):
        if not line or line.isspace():  # blank: `not line.strip()` without copying the line
            continue
        where = f"{source_name} line {number}"
        raw = parse_json(line, where, LossMaskError)
        row = canonical_row(raw, fmt, where=where)
        try:
            flags, kept, turns = judge_row(row, known_broken_families=known_broken_families,
                                           prose_commands=prose_commands)
        except LossMaskError as exc:
            raise LossMaskError(f"{where}: {exc}") from None
        source = str(row.get("source"))
        tally = tallies.get(source)
        if tally is None:
            tally = tallies[source] = _Tally()
        tally.add(flags, kept, turns)
        run = rules_run(row)
        tally.rules[run] = tally.rules.get(run, 0) + 1
        tally.ids[row_id_source(raw, fmt)] += 1
    return _result({source: tally.counts() for source, tally in tallies.items()})


class _Tally:
    """One source's counts while streaming: rows, turns, and each distinct reason set's count."""

    def __init__(self):
        self.rows = self.assistant_turns = self.rows_touched = 0
        self.flagged: dict[frozenset[str], int] = {}
        self.kept: dict[frozenset[str], int] = {}
        self.rules: dict[tuple[frozenset[str], frozenset[str]], int] = {}  # (ran, skipped) -> rows
        self.ids: Counter = Counter()

    def add(self, flags: dict[int, frozenset[str]], kept: dict[int, frozenset[str]], turns: int) -> None:
        self.rows += 1
        self.assistant_turns += turns
        if flags:
            self.rows_touched += 1
            for reasons in flags.values():
                self.flagged[reasons] = self.flagged.get(reasons, 0) + 1
        for labels in kept.values():
            self.kept[labels] = self.kept.get(labels, 0) + 1

    def counts(self) -> dict:
        """The tally in the form merge_census and _result add up."""
        tally = _empty()
        tally.update(rows=self.rows, assistant_turns=self.assistant_turns, rows_touched=self.rows_touched,
                     masked_turns=sum(self.flagged.values()))
        for reasons, n in self.flagged.items():
            tally["combinations"]["+".join(sorted(reasons))] += n
            for reason in reasons:
                tally["reasons"][reason] += n
        for labels, n in self.kept.items():
            for label in labels:
                tally["left_alone"][label] += n
        for (ran, skipped), n in self.rules.items():
            tally["ran"].update(dict.fromkeys(ran, n))
            tally["skipped"].update(dict.fromkeys(skipped, n))
        tally["row_ids"].update(self.ids)
        return tally


def merge_census(parts: Iterable[dict]) -> dict:
    """One census from the censuses of consecutive ranges of a file (counts add up)."""
    tallies: dict[str, dict] = {}
    for part in parts:
        for source, plain in part["by_source"].items():
            tally = tallies.setdefault(source, _empty())
            for key in FIELDS:
                tally[key] += plain[key]
            for key in KINDS:
                tally[key].update(plain[key])
    return _result(tallies)


def _result(tallies: dict[str, dict]) -> dict:
    total = _empty()
    for tally in tallies.values():
        for key in FIELDS:
            total[key] += tally[key]
        for key in KINDS:
            total[key].update(tally[key])
    return {"total": _plain(total), "by_source": {s: _plain(t) for s, t in sorted(tallies.items())}}


def _empty() -> dict:
    return {**dict.fromkeys(FIELDS, 0), **{kind: Counter() for kind in KINDS}}


def _plain(tally: dict) -> dict:
    """JSON-ready with a fixed key order, so a census file is byte-identical across runs."""
    return {**{k: tally[k] for k in FIELDS},
            **{k: dict(sorted(tally[k].items())) for k in KINDS}}


def census_table(dataset: str, counted: dict) -> pl.DataFrame:
    """The census long: one row per (source, kind, name) with its count, `total` as a source."""
    rows = []
    for source, tally in [("total", counted["total"]), *counted["by_source"].items()]:
        rows += [{"dataset": dataset, "source": source, "kind": "count", "name": k, "count": v}
                 for k, v in tally.items() if isinstance(v, int)]
        rows += [{"dataset": dataset, "source": source, "kind": kind, "name": name, "count": n}
                 for kind in KINDS for name, n in tally[kind].items()]
    return pl.DataFrame(rows, schema={"dataset": pl.String, "source": pl.String, "kind": pl.String,
                                      "name": pl.String, "count": pl.Int64})
