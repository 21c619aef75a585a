"""`apsft compare`'s three forms of one comparison (core/compare.py): a text table for the terminal, a Markdown
report and a PNG of each policy's core-IID accuracy with its interval, A and B side by side.

No timestamp and fixed float formats, and the plot made as the report's are (core/report_plots.py), so
comparing the same two stores again writes the same bytes.
"""

from __future__ import annotations

from pathlib import Path

from apsft_dagster.core import report_plots
from apsft_dagster.core.splits import PRIMARY

MARKDOWN = "compare.md"
PLOT = "accuracy.png"
_OFFSET = 0.15  # A left of each tick, B right of it


def _cells(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    head = list(rows[0])
    return head, [[str(r[h]) for h in head] for r in rows]


def _text_table(rows: list[dict]) -> list[str]:
    if not rows:
        return ["  (none)"]
    head, body = _cells(rows)
    widths = [max(len(x) for x in column) for column in zip(head, *body)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
            for cells in (head, ["-" * w for w in widths], *body)]


def _markdown_table(rows: list[dict]) -> list[str]:
    if not rows:
        return ["(none)"]
    head, body = _cells(rows)
    cells = [[c.replace("|", "\\|") for c in row] for row in (head, *body)]
    lines = ["| " + " | ".join(row) + " |" for row in cells]
    return [lines[0], "|" + "---|" * len(head), *lines[1:]]


def text(doc: dict) -> str:
    """The comparison as the terminal shows it: each section a titled, aligned table."""
    lines = [f"A: {doc['stores']['A']}", f"B: {doc['stores']['B']}", ""]
    for title, note, rows in doc["sections"]:
        lines += [title, *([f"  {note}"] if note else []), *_text_table(rows), ""]
    return "\n".join(lines)


def markdown(doc: dict) -> str:
    """The comparison as a Markdown report, with the accuracy plot (`PLOT`, written beside it)."""
    lines = ["# Two experiments compared", "", f"- A: `{doc['stores']['A']}`", f"- B: `{doc['stores']['B']}`", ""]
    for title, note, rows in doc["sections"]:
        lines += [f"## {title}", "", *([note, ""] if note else []), *_markdown_table(rows), ""]
    lines += ["## Plot", "", f"![{PRIMARY} accuracy, A and B]({PLOT})", ""]
    return "\n".join(lines)


def accuracy_plot(doc: dict) -> bytes:
    """Each policy's core-IID accuracy with its interval: A left of the tick, B right of it."""
    fig, ax = report_plots.axes("", f"{PRIMARY} accuracy", "Stage A: core-IID accuracy, A and B side by side")
    sides = doc["accuracy"]
    names = [*sides["A"], *(p for p in sides["B"] if p not in sides["A"])]
    for (side, figures), offset, colour in zip(sides.items(), (-_OFFSET, _OFFSET), ("tab:blue", "tab:orange")):
        shown = [(i, *figures[p]) for i, p in enumerate(names) if p in figures]  # (tick, accuracy, lower, upper)
        ax.errorbar([i + offset for i, *_ in shown], [a for _, a, _, _ in shown],
                    yerr=[[a - lo for _, a, lo, _ in shown], [hi - a for _, a, _, hi in shown]],
                    fmt="o", capsize=4, color=colour,
                    label=f"{side}: {doc['profiles'][side]} ({Path(doc['stores'][side]).name})")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return report_plots.png(fig)
