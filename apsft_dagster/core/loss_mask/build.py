"""The build: one streaming pass that masks exactly the flagged assistant turns and nothing else.

A flagged turn gets `"step_loss_mask": 0`, inserted into the row's own bytes (splice.py), so every
other byte of a touched row stays as well. Rows in = rows out,
in order; a row with nothing flagged is written as its original bytes. Beside the output goes a
flags file, one JSON line per masked turn (row id, message index, reasons, SHA-256 of the
content), and the per-reason counts must equal the census's exactly, else the build fails.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from json.encoder import encode_basestring
from typing import BinaryIO

from apsft_dagster.core.loss_mask.rules import LossMaskError, flag_row
from apsft_dagster.core.loss_mask.splice import mask_in_place
from apsft_dagster.core.loss_mask.streams import BlockSink, Hasher, HashThread, hashed_lines

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


def build(lines: Iterable[bytes] | BinaryIO, out: BinaryIO, flags_out: BinaryIO, *,
          expected_reasons: dict[str, int] | None, known_broken_families: frozenset[str] = frozenset(),
          prose_commands: frozenset[str] | None = None, digests: bool = True) -> dict:
    """Mask the flagged turns of every row; return the build report (counts and digests).
    `lines` is an iterable of lines or a binary file (read and hashed in blocks: streams.py).
    A range of a file passes `expected_reasons=None` (its caller compares the sum) and may pass
    `digests=False` (its caller hashes the joined files; the report's digests are then empty)."""
    thread = HashThread() if digests else None
    output, flags = BlockSink(out, digests, thread), BlockSink(flags_out, digests, thread)
    base: Hasher | BlockSink | None = None
    if hasattr(lines, "read"):
        base = Hasher(thread) if digests else None
        stream = hashed_lines(lines, base)
    elif digests:
        base = BlockSink(thread=thread)
        stream = _written(lines, base)
    else:
        stream = iter(lines)
    try:
        report = _build(stream, output, flags, expected_reasons, known_broken_families, prose_commands)
        output.flush()
        flags.flush()
        return {**report, **{f"{name}_sha256": part.hexdigest() if digests else None
                             for name, part in (("base", base), ("output", output), ("flags", flags))},
                "output_bytes": output.bytes}
    finally:
        if thread is not None:
            thread.close()


def _written(lines: Iterable[bytes], sink: BlockSink) -> Iterator[bytes]:
    for line in lines:
        sink.write(line)
        yield line


def _build(lines: Iterator[bytes], output: BlockSink, flags: BlockSink, expected_reasons: dict[str, int] | None,
           known_broken_families: frozenset[str], prose_commands: frozenset[str] | None) -> dict:
    combinations: dict[frozenset[str], int] = {}  # each distinct reason set -> masked turns
    rows = 0
    for line in lines:
        if not line or line.isspace():  # blank: `not line.strip()` without copying the line
            continue
        row = json.loads(line)
        rows += 1
        found = flag_row(row, known_broken_families=known_broken_families, prose_commands=prose_commands)
        if any(MASK_KEY in message for message in row["messages"]):  # a parsed key: every spelling
            raise LossMaskError(f"row {row['row_id']!r}: the base already carries {MASK_KEY}; build from an "
                                "unmasked export")
        if not found:
            output.write(line if line.endswith(b"\n") else line + b"\n")
            continue
        indices = sorted(found)
        for index in indices:
            why = found[index]
            flags.write(flag_line(row["row_id"], index, sorted(why), row["messages"][index].get("content")))
            combinations[why] = combinations.get(why, 0) + 1
        masked = mask_in_place(line, indices, len(row["messages"]), row["row_id"], MASK_KEY)
        output.write(masked if masked.endswith(b"\n") else masked + b"\n")
    reasons = Counter()
    for why, n in combinations.items():
        reasons.update(dict.fromkeys(why, n))
    if expected_reasons is not None and dict(sorted(reasons.items())) != dict(sorted(expected_reasons.items())):
        raise LossMaskError(f"build masked {dict(sorted(reasons.items()))} but the census counted "
                            f"{dict(sorted(expected_reasons.items()))}; the input changed or the rules differ")
    return {"rows": rows, "masked_turns": sum(combinations.values()), "reasons": dict(sorted(reasons.items()))}


def build_problems(report: dict, counted: dict) -> list[str]:
    """The build's gate: rows in = rows out, and masked turns per reason = the census's counts."""
    return ([f"{report['rows']} rows out, the census read {counted['rows']}"] * (report["rows"] != counted["rows"])
            + [f"masked {report['reasons']}, the census counted {counted['reasons']}"]
            * (report["reasons"] != counted["reasons"]))
