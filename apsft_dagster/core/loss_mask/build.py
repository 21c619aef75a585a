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
MASK_BYTES = MASK_KEY.encode()
# json.dumps(row, ensure_ascii=False) without building an encoder per row; a parsed row is a tree,
# so the circular-reference check cannot fire and only costs time.
_ENCODE = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode


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
    """Writes through to a binary file while hashing what passed (unless `hashing` is off)."""

    def __init__(self, sink: BinaryIO | None = None, hashing: bool = True):
        self.sink, self.hash, self.bytes, self.hashing = sink, hashlib.sha256(), 0, hashing

    def write(self, data: bytes) -> None:
        if self.hashing:
            self.hash.update(data)
        self.bytes += len(data)
        if self.sink is not None:
            self.sink.write(data)


def build(lines: Iterable[bytes], out: BinaryIO, flags_out: BinaryIO, *, expected_reasons: dict[str, int] | None,
          known_broken_families: frozenset[str] = frozenset(), prose_commands: frozenset[str] | None = None,
          digests: bool = True) -> dict:
    """Mask the flagged turns of every row; return the build report (counts and digests).
    A range of a file passes `expected_reasons=None` (its caller compares the sum) and may pass
    `digests=False` (its caller hashes the joined files; the report's digests are then empty)."""
    base, output, flags = _Digest(hashing=digests), _Digest(out, digests), _Digest(flags_out, digests)
    combinations: dict[frozenset[str], int] = {}  # each distinct reason set -> masked turns
    rows = 0
    for line in lines:
        base.write(line)
        if not line or line.isspace():  # blank: `not line.strip()` without copying the line
            continue
        row = json.loads(line)
        rows += 1
        if _carries_mask(row, line):
            raise LossMaskError(f"row {row.get('row_id')!r}: the base already carries {MASK_KEY}; build from an unmasked export")
        found = flag_row(row, known_broken_families=known_broken_families, prose_commands=prose_commands)
        if not found:
            output.write(line if line.endswith(b"\n") else line + b"\n")
            continue
        for index, why in sorted(found.items()):
            message = row["messages"][index]
            message[MASK_KEY] = 0
            flags.write(flag_line(row["row_id"], index, sorted(why), message.get("content")))
            combinations[why] = combinations.get(why, 0) + 1
        output.write(_ENCODE(row).encode() + b"\n")
    reasons = Counter()
    for why, n in combinations.items():
        reasons.update(dict.fromkeys(why, n))
    if expected_reasons is not None and dict(sorted(reasons.items())) != dict(sorted(expected_reasons.items())):
        raise LossMaskError(f"build masked {dict(sorted(reasons.items()))} but the census counted "
                            f"{dict(sorted(expected_reasons.items()))}; the input changed or the rules differ")
    return {"rows": rows, "masked_turns": sum(combinations.values()), "reasons": dict(sorted(reasons.items())),
            **{f"{name}_sha256": digest.hash.hexdigest() if digests else None
               for name, digest in (("base", base), ("output", output), ("flags", flags))},
            "output_bytes": output.bytes}


def _carries_mask(row: object, line: bytes) -> bool:
    """Whether a message of the base row already has a `step_loss_mask` key. In a UTF-8 line the
    key is spelt either literally or with \\u escapes (UTF-16/32 text holds NUL bytes), so a line
    with none of the three cannot carry it and its messages need not be searched."""
    if (MASK_BYTES not in line and b"\\u" not in line and b"\x00" not in line
            and isinstance(row, dict) and isinstance(row.get("messages", []), list)):
        return False
    return any(MASK_KEY in m for m in row.get("messages", []) if isinstance(m, dict))
