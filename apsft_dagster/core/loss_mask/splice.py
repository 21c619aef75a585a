"""Masking a row in its own text: `"step_loss_mask": 0` is inserted before the closing brace of
each flagged message, so every other byte of the row stays exactly as the base wrote it (its
escapes, spacing, number spelling and key order) and the row is never re-encoded.

The positions come from walking the row's top-level object with json's own C scanner: each
key is read with `scanstring`, each value skipped with `scan_once` (one C call per value), and
the elements of `messages` (the last such key, as json.loads keeps) are scanned one by one to
record where each closes. It runs on lines json.loads has already accepted; a line whose
structure does not match the parsed row raises instead of guessing.
"""

from __future__ import annotations

import json
from json.decoder import WHITESPACE, JSONDecoder, scanstring

from apsft_dagster.core.loss_mask.rules import LossMaskError

_SCAN = JSONDecoder().scan_once  # (value, index after it) of the JSON value at an index, in C


def _skip(text: str, i: int) -> int:
    return WHITESPACE.match(text, i).end()


def message_ends(text: str) -> tuple[list[int] | None, bool]:
    """(index of the closing brace of each element of the row's top-level `messages` array,
    whether the row's first key is followed by `": "` rather than a bare colon); the indices are
    None when the row has no such array or an element is not an object."""
    i = _skip(text, 0)
    if text[i:i + 1] != "{":
        return None, True
    i, found, spaced = _skip(text, i + 1), None, None
    while text[i:i + 1] == '"':
        key, i = scanstring(text, i + 1)
        colon = _skip(text, i)
        if spaced is None:
            spaced = text[colon + 1:colon + 2] == " "
        i = _skip(text, colon + 1)
        if key == "messages" and text[i:i + 1] == "[":
            found, i = _elements(text, i)
        else:
            _, i = _SCAN(text, i)
        i = _skip(text, i)
        if text[i:i + 1] != ",":
            break
        i = _skip(text, i + 1)
    return found, bool(spaced)


def _elements(text: str, i: int) -> tuple[list[int] | None, int]:
    """The closing-brace index of each element of the array at i (None if one is not an object),
    and the index after the array."""
    ends: list[int] | None = []
    i = _skip(text, i + 1)
    while text[i:i + 1] != "]":
        objects = text[i:i + 1] == "{"
        _, i = _SCAN(text, i)
        if ends is not None:
            ends = ends + [i - 1] if objects else None
        i = _skip(text, i)
        if text[i:i + 1] == ",":
            i = _skip(text, i + 1)
    return ends, i + 1


def mask_in_place(line: bytes, indices: list[int], message_count: int, row_id: str, key: str) -> bytes:
    """The line with `"<key>": 0` added as the last member of each message in `indices` (sorted),
    spaced like the row's own members (`, "k": 0` after `"a": 1`, `,"k":0` after `"a":1`)."""
    encoding = json.detect_encoding(line)  # as json.loads decoded it
    text = line.decode(encoding)
    ends, spaced = message_ends(text)
    if ends is None or len(ends) != message_count:
        raise LossMaskError(f"row {row_id!r}: the line's messages array could not be located in its text "
                            f"({'none' if ends is None else len(ends)} found, {message_count} parsed); report this row")
    insert = f', "{key}": 0' if spaced else f',"{key}":0'
    parts, at = [], 0
    for index in indices:
        end = ends[index]
        parts += [text[at:end], insert]
        at = end
    parts.append(text[at:])
    return "".join(parts).encode(encoding)
