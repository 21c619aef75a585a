"""The derived splits' tasks: a derived split (Stage B's `rendering`) holds its source split's tasks
(same cells, seeds and answers) under another prompt template, sealed like the others (the
catalog's firewall and answer checks cover it). The split table itself is core/splits.py."""

from __future__ import annotations

from apsft_dagster.core.splits import SPLIT_TABLE

DERIVED = {s.name: s.derived_from for s in SPLIT_TABLE if s.derived_from}  # derived split -> its source


def render_second(prompt: str) -> str:
    """The second prompt template (the `rendering` split): the same task text, framed otherwise.
    It never names the answer line: the boundary stays the model's own to write."""
    return ("Here is a puzzle. Read all of it before you start.\n\n"
            f"{prompt}\n\nWork it out step by step and finish with the final value.")
