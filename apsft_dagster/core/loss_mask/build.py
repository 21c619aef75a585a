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
import queue
import threading
from collections import Counter
from collections.abc import Iterable
from json.encoder import encode_basestring
from typing import BinaryIO

from apsft_dagster.core.loss_mask.rules import LossMaskError, flag_row
from apsft_dagster.core.loss_mask.splice import mask_in_place

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
    """Writes through to a binary file while hashing what passed (unless `hashing` is off).

    The SHA-256 runs on a thread: hashlib releases the GIL while it hashes a large buffer, so
    the build's own thread pays only for handing over 1 MiB batches (a bounded queue, so memory
    stays flat however far the hash falls behind). `hexdigest()` drains it; `close()` stops it."""

    BATCH = 1 << 20

    def __init__(self, sink: BinaryIO | None = None, hashing: bool = True):
        self.sink, self.hash, self.bytes, self.hashing = sink, hashlib.sha256(), 0, hashing
        self._pending: list[bytes] = []
        self._size = 0
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=8)
        self._thread = threading.Thread(target=self._run, name="lm-build-sha256", daemon=True) if hashing else None
        if self._thread is not None:
            self._thread.start()

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            self.hash.update(chunk)

    def write(self, data: bytes) -> None:
        self.bytes += len(data)
        if self.sink is not None:
            self.sink.write(data)
        if self.hashing:
            self._pending.append(data)
            self._size += len(data)
            if self._size >= self.BATCH:
                self._queue.put(b"".join(self._pending))
                self._pending, self._size = [], 0

    def hexdigest(self) -> str:
        self.close()
        return self.hash.hexdigest()

    def close(self) -> None:
        if self._thread is not None:
            if self._pending:
                self._queue.put(b"".join(self._pending))
                self._pending = []
            self._queue.put(None)
            self._thread.join()
            self._thread = None


def build(lines: Iterable[bytes], out: BinaryIO, flags_out: BinaryIO, *, expected_reasons: dict[str, int] | None,
          known_broken_families: frozenset[str] = frozenset(), prose_commands: frozenset[str] | None = None,
          digests: bool = True) -> dict:
    """Mask the flagged turns of every row; return the build report (counts and digests).
    A range of a file passes `expected_reasons=None` (its caller compares the sum) and may pass
    `digests=False` (its caller hashes the joined files; the report's digests are then empty)."""
    base, output, flags = _Digest(hashing=digests), _Digest(out, digests), _Digest(flags_out, digests)
    try:
        return _build(lines, base, output, flags, expected_reasons, known_broken_families, prose_commands, digests)
    finally:
        for digest in (base, output, flags):
            digest.close()


def _build(lines: Iterable[bytes], base: _Digest, output: _Digest, flags: _Digest,
           expected_reasons: dict[str, int] | None, known_broken_families: frozenset[str],
           prose_commands: frozenset[str] | None, digests: bool) -> dict:
    combinations: dict[frozenset[str], int] = {}  # each distinct reason set -> masked turns
    rows = 0
    for line in lines:
        base.write(line)
        if not line or line.isspace():  # blank: `not line.strip()` without copying the line
            continue
        row = json.loads(line)
        rows += 1
        found = flag_row(row, known_broken_families=known_broken_families, prose_commands=prose_commands)
        if any(MASK_KEY in message for message in row["messages"]):  # a parsed key: every spelling
            raise LossMaskError(f"row {row['row_id']!r}: the base already carries {MASK_KEY}; build from an unmasked export")
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
    return {"rows": rows, "masked_turns": sum(combinations.values()), "reasons": dict(sorted(reasons.items())),
            **{f"{name}_sha256": digest.hexdigest() if digests else None
               for name, digest in (("base", base), ("output", output), ("flags", flags))},
            "output_bytes": output.bytes}

