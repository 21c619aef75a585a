"""Encoding the rows to pack, in input order: one process, or `workers` processes over chunks of lines
(the results come back in input order, so the packs are byte-identical to one process's).

Each non-blank line becomes (reason, row_id, ids, mask, trainable, masked_assistant): reason None and
the token arrays for a row to pack, or reason `over_limit` (more tokens than pack_length: checked first,
since length does not depend on masking) / `no_trainable` (no trainable token) with ids = its token
count and the rest empty.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from multiprocessing import get_context

from apsft_dagster.core.json_input import parse_json
from apsft_dagster.core.loss_mask.formats import canonical_row
from apsft_dagster.core.loss_mask.rules import ROLES, LossMaskError
from apsft_dagster.core.loss_mask.spans import checked, encode_arrays

NO_TRAINABLE, OVER_LIMIT = "no_trainable", "over_limit"

CHUNK_ROWS = 16  # rows sent to a worker at a time
IN_FLIGHT = 4  # chunks queued per worker
_STATE: dict = {}  # the settings: this process's, or a worker's from _start


def parse_row(line: bytes, where: str, fmt: str) -> dict:
    """The row as packing reads it (formats.canonical_row), its fields checked."""
    row = canonical_row(parse_json(line, where, LossMaskError), fmt, where=where)
    rid = row.get("row_id") if isinstance(row, dict) else None
    if not isinstance(rid, str):
        raise LossMaskError(f"{where}: field 'row_id' must be a string; fix the row")
    messages = row.get("messages")
    if not messages or not isinstance(messages, list) or not all(
            isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), (str, type(None)))
            and isinstance(m.get("reasoning_content"), (str, type(None))) for m in messages):
        raise LossMaskError(f"row {rid!r} ({where}): field 'messages' must be a non-empty list of messages with a "
                            f"role in {sorted(ROLES)}, string or null content and reasoning_content; fix the row")
    if isinstance(row.get("system"), str) and messages[0]["role"] != "system":  # ShareGPT's top-level system
        row = {**row, "messages": [{"role": "system", "content": row["system"]}, *messages]}
    return row


def _encode(number: int, line: bytes) -> tuple:
    s = _STATE
    row = parse_row(line, f"{s['source']} line {number}", s["fmt"])
    ids, mask, _, masked, _ = checked(row["row_id"], encode_arrays(row, s["tokenizer"], s["template"]))
    trainable = int(mask.sum())
    reason = OVER_LIMIT if len(ids) > s["pack_length"] else NO_TRAINABLE if not trainable else None
    if reason:
        return reason, row["row_id"], len(ids), None, 0, 0
    return None, row["row_id"], ids, mask, trainable, masked


def _encode_chunk(chunk: list[tuple[int, bytes]]) -> list[tuple]:
    return [_encode(number, line) for number, line in chunk]


def _chunks(lines: Iterable[bytes]) -> Iterator[list[tuple[int, bytes]]]:
    chunk = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            chunk.append((number, line))
            if len(chunk) == CHUNK_ROWS:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def _start(state: dict) -> None:
    _STATE.update(state)


def encoded_rows(lines: Iterable[bytes], tokenizer, template: str, pack_length: int, fmt: str, source: str,
                 workers: int = 1) -> Iterator[tuple]:
    state = {"tokenizer": tokenizer, "template": template, "pack_length": pack_length, "fmt": fmt, "source": source}
    _STATE.update(state)
    if workers <= 1:
        for chunk in _chunks(lines):
            yield from _encode_chunk(chunk)
        return
    # spawned, never forked (a fork of a process whose threads hold a lock can hang the child); the tokenizer
    # travels pickled, once. Closed and joined, never terminated: terminate() is SIGTERM, which a process may
    # ignore (the disposition is inherited across exec: CI's test workers ignore it) and then joins forever.
    pool = get_context("spawn").Pool(workers, initializer=_start, initargs=(state,))
    try:
        pending: deque = deque()  # at most IN_FLIGHT chunks a worker: bounded read-ahead, taken in input order
        for chunk in _chunks(lines):
            pending.append(pool.apply_async(_encode_chunk, (chunk,)))
            if len(pending) >= IN_FLIGHT * workers:
                yield from pending.popleft().get()
        while pending:
            yield from pending.popleft().get()
    finally:
        pool.close()  # each worker takes the end-of-work sentinel after what is queued, then exits
        pool.join()
