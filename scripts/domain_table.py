"""Write docs/PROTOCOL.md's table of every profile field's domain from the config model itself
(core/domains.py); tests/test_config_domains.py fails when the table and the model disagree."""

from __future__ import annotations

import sys
from pathlib import Path

from apsft_dagster.core.domains import domain_table

BEGIN, END = "<!-- domains:begin (scripts/domain_table.py writes this table) -->", "<!-- domains:end -->"
PROTOCOL = Path(__file__).resolve().parents[1] / "docs" / "PROTOCOL.md"


def with_table(text: str) -> str:
    """PROTOCOL.md's text with the table between the markers replaced by the model's."""
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{domain_table()}{END}{tail}"


if __name__ == "__main__":
    text = PROTOCOL.read_text()
    new = with_table(text)
    PROTOCOL.write_text(new)
    print(f"{PROTOCOL}: domain table {'rewritten' if new != text else 'already current'}")
    sys.exit(0)
