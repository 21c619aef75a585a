"""Masking a row in its own text: `"step_loss_mask": 0` is inserted before the closing brace of
each flagged message, so every other byte of the row stays exactly as the base wrote it (its
escapes, spacing, number spelling and key order) and the row is never re-encoded.

The positions come from walking the row's top-level object with json's own C scanner: each
key is read with `scanstring`, each value skipped with `scan_once` (one C call per value), and
the elements of `messages` (or `conversations`: the last such key, as json.loads keeps) are scanned one by one to
record where each closes. It runs on lines json.loads has already accepted; a line whose
structure does not match the parsed row raises instead of guessing.
"""

from __future__ import annotations

import json
import re
from json.decoder import JSONDecoder, scanstring

from apsft_dagster.core.loss_mask.rules import LossMaskError

_SCAN = JSONDecoder().scan_once  # (value, index after it) of the JSON value at an index, in C
_WS = re.compile(r"[ \t\n\r]*")
_COLON = re.compile(r"[ \t\n\r]*:([ \t\n\r]*)")  # after a key; group 1: the space a writer put after ':'
_NEXT = re.compile(r"[ \t\n\r]*([,\]}])[ \t\n\r]*")  # after a value: the separator or the closing bracket


def message_ends(text: str, upto: int | None = None, array: str = "messages") -> tuple[list[int] | None, bool, bool]:
    """(index of the closing brace of each element of the row's top-level `array` (`messages`, or a
    ShareGPT row's `conversations`), whether
    the row's keys are followed by `": "` rather than a bare colon, whether the list is the whole
    array); the indices are None when the row has no such array or an element is not an object.
    With `upto`, the scan may stop after element `upto` when no later `messages` key can follow
    (json.loads keeps the last): the elements after the last masked one need no second parse."""
    i = _WS.match(text).end()
    if text[i:i + 1] != "{":
        return None, True, True
    i, found, spaced, whole = _WS.match(text, i + 1).end(), None, None, True
    while text[i:i + 1] == '"':
        key, i = scanstring(text, i + 1)
        colon = _COLON.match(text, i)
        if spaced is None:
            spaced = bool(colon.group(1))
        i = colon.end()
        if key == array and text[i:i + 1] == "[":
            start = i
            found, i, whole = _elements(text, start, upto)
            if text.find(f'"{array}"', i) < 0 and text.find("\\u", i) < 0:
                break  # this is the last `messages` key
            if not whole:  # another may follow: this array is read to its end after all
                found, i, whole = _elements(text, start, None)
        else:
            i = _SCAN(text, i)[1]
        after = _NEXT.match(text, i)
        if after.group(1) != ",":
            break
        i = after.end()
    return found, bool(spaced), whole


def _elements(text: str, i: int, upto: int | None) -> tuple[list[int] | None, int, bool]:
    """The closing-brace index of each element of the array at i (None if one is not an object),
    the index after the last element read, and whether that was the array's end."""
    ends: list[int] | None = []
    i = _WS.match(text, i + 1).end()
    if text[i:i + 1] == "]":
        return ends, i + 1, True
    k = 0
    while True:
        is_object = text[i] == "{"
        i = _SCAN(text, i)[1]
        if ends is not None:
            if is_object:
                ends.append(i - 1)
            else:
                ends = None
        after = _NEXT.match(text, i)
        if after.group(1) != ",":
            return ends, after.end(), True
        if k == upto and ends is not None:
            return ends, i, False
        i, k = after.end(), k + 1


def mask_in_place(line: bytes, indices: list[int], message_count: int, row_id: str, key: str,
                  array: str = "messages") -> bytes:
    """The line with `"<key>": 0` added as the last member of each message in `indices` (sorted) of
    the row's `array`, spaced like the row's own members (`, "k": 0` after `"a": 1`, `,"k":0` after `"a":1`)."""
    # as json.loads decoded it (a line that opens with "{" and no NUL is UTF-8, without the look-up)
    encoding = "utf-8" if line[:1] == b"{" and line[1:2] != b"\x00" else json.detect_encoding(line)
    text = line.decode(encoding)
    ends, spaced, whole = message_ends(text, indices[-1], array)
    if ends is None or (len(ends) != message_count if whole else len(ends) <= indices[-1]):
        raise LossMaskError(f"row {row_id!r}: the line's {array} array could not be located in its text "
                            f"({'none' if ends is None else len(ends)} found, {message_count} parsed); report this row")
    insert = f', "{key}": 0' if spaced else f',"{key}":0'
    parts, at = [], 0
    for index in indices:
        end = ends[index]
        parts += [text[at:end], insert]
        at = end
    parts.append(text[at:])
    return "".join(parts).encode(encoding)
