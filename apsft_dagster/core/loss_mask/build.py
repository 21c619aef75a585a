"""The build: one streaming pass that masks exactly the flagged assistant turns and nothing else.

A flagged turn gets `"step_loss_mask": 0`; every other byte of meaning stays. Rows in = rows out,
in order; a row with nothing flagged is written as its original bytes. Beside the output goes a
flags file, one JSON line per masked turn (row id, message index, reasons, SHA-256 of the
content), and the per-reason counts must equal the census's exactly, else the build fails.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from json.encoder import encode_basestring
from typing import BinaryIO

from apsft_dagster.core.loss_mask.rules import LossMaskError, flag_row

MASK_KEY = "step_loss_mask"


def _json_str(value: str | None) -> str:
    """json.dumps(value, ensure_ascii=False) for a string or None, without the encoder's per-call
    set-up (the build's hot path): the C string encoder json.dumps itself uses."""
    return "null" if value is None else encode_basestring(value)


def content_sha256(content: str | None) -> str:
    """The digest a flag records for a turn's content: SHA-256 of its JSON text (null and "" differ)."""
    return hashlib.sha256(_json_str(content).encode()).hexdigest()


def flag_line(row_id: str, index: int, reasons: list[str], content: str | None) -> bytes:
    """One flags record: exactly json.dumps({...}, sort_keys=True, ensure_ascii=False) and a newline."""
    return (f'{{"content_sha256": "{content_sha256(content)}", "message_index": {index}, '
            f'"reasons": [{", ".join(map(encode_basestring, reasons))}], "row_id": {encode_basestring(row_id)}}}\n'
            ).encode()


class _Digest:
    """Writes through to a binary file while hashing what passed."""

    def __init__(self, sink: BinaryIO | None = None):
        self.sink, self.hash, self.bytes = sink, hashlib.sha256(), 0

    def write(self, data: bytes) -> None:
        self.hash.update(data)
        self.bytes += len(data)
        if self.sink is not None:
            self.sink.write(data)


def build(lines: Iterable[bytes], out: BinaryIO, flags_out: BinaryIO, *, expected_reasons: dict[str, int] | None,
          known_broken_families: frozenset[str] = frozenset(), prose_commands: frozenset[str] | None = None) -> dict:
    """Mask the flagged turns of every row; return the build report (counts and digests).
    `expected_reasons=None` skips the census comparison (a range of a file: its caller compares the sum)."""
    base, output, flags = _Digest(), _Digest(out), _Digest(flags_out)
    reasons, rows, masked = Counter(), 0, 0
    for line in lines:
        base.write(line)
        if not line.strip():
            continue
        row = json.loads(line)
        rows += 1
        if any(MASK_KEY in m for m in row.get("messages", []) if isinstance(m, dict)):
            raise LossMaskError(f"row {row.get('row_id')!r}: the base already carries {MASK_KEY}; build from an unmasked export")
        found = flag_row(row, known_broken_families=known_broken_families, prose_commands=prose_commands)
        if not found:
            output.write(line if line.endswith(b"\n") else line + b"\n")
            continue
        for index, why in sorted(found.items()):
            message = row["messages"][index]
            message[MASK_KEY] = 0
            flags.write(flag_line(row["row_id"], index, sorted(why), message.get("content")))
            reasons.update(why)
            masked += 1
        output.write(json.dumps(row, ensure_ascii=False).encode() + b"\n")
    if expected_reasons is not None and dict(sorted(reasons.items())) != dict(sorted(expected_reasons.items())):
        raise LossMaskError(f"build masked {dict(sorted(reasons.items()))} but the census counted "
                            f"{dict(sorted(expected_reasons.items()))}; the input changed or the rules differ")
    return {"rows": rows, "masked_turns": masked, "reasons": dict(sorted(reasons.items())),
            "base_sha256": base.hash.hexdigest(), "output_sha256": output.hash.hexdigest(),
            "flags_sha256": flags.hash.hexdigest(), "output_bytes": output.bytes}
