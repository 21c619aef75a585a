"""The input fuzzer the suite (tests/test_fuzz_inputs.py) and benchmarks/fuzz.py share: mutations of
valid inputs, and the oracle every reader must meet. A reader either accepts a mutated input that
is still valid, or raises one of the project's errors naming the file it read; any other exception
fails the test. `APSFT_FUZZ_EXAMPLES` sets the examples per reader (the suite's bound: 60), and
`APSFT_FUZZ_REPORT` a JSON file the tallies (inputs tried, accepted, refusals by error) go to."""

from __future__ import annotations

import atexit
import json
import os
from collections import Counter, defaultdict
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("APSFT_FUZZ_EXAMPLES", "60"))
REPORT = os.environ.get("APSFT_FUZZ_REPORT")
TALLY: dict[str, Counter] = defaultdict(Counter)
DEEP = 100_000  # nesting far past what a recursive parser holds
RETYPES = [None, "x", 0, -1, 1.5, 10**30, True, [], {}, [[1]], {"a": {"b": None}}]


def fuzz_settings(examples: int | None = None):
    """Bounded and reproducible: a fixed example count (`examples` at the suite's bound, scaled
    with APSFT_FUZZ_EXAMPLES) and a seed derived from the test's name."""
    return settings(max_examples=max(1, round((examples or 60) * EXAMPLES / 60)), deadline=None, derandomize=True,
                    database=None, suppress_health_check=list(HealthCheck))


def record(reader: str, outcome: str) -> None:
    TALLY[reader]["tried"] += 1
    TALLY[reader][outcome] += 1


def _dump() -> None:
    if REPORT and TALLY:
        path = Path(REPORT)
        old = json.loads(path.read_text()) if path.is_file() else {}
        for reader, counts in TALLY.items():
            merged = Counter(old.get(reader, {}))
            merged.update(counts)
            old[reader] = dict(sorted(merged.items()))
        path.write_text(json.dumps(old, indent=2, sort_keys=True) + "\n")


atexit.register(_dump)


# -- byte mutations ------------------------------------------------------------------------------
@st.composite
def mutated_bytes(draw, data: bytes) -> bytes:
    """One of: a byte flipped, the tail cut, a slice dropped, invalid UTF-8 spliced in, a stray byte."""
    n = max(len(data), 1)
    at = draw(st.integers(0, n - 1))
    kind = draw(st.sampled_from(["flip", "truncate", "drop", "invalid_utf8", "insert"]))
    if kind == "flip":
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    if kind == "truncate":
        return data[:at]
    if kind == "drop":
        return data[:at] + data[at + draw(st.integers(1, 64)):]
    if kind == "invalid_utf8":
        return data[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80"])) + data[at:]
    return data[:at] + draw(st.sampled_from([b"{", b"}", b"[", b'"', b",", b"\\", b"\x00", b"\n"])) + data[at:]


# -- structural mutations of a JSON document -------------------------------------------------------
def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node[:4]):
            yield from _paths(value, (*prefix, i))


def _get(node, path):
    for part in path:
        node = node[part]
    return node


@st.composite
def mutated_document(draw, doc) -> bytes:
    """A field dropped or retyped somewhere in the document, a key given twice, or deep nesting;
    returned as bytes (still JSON text, except that the duplicate key is ambiguous JSON)."""
    doc = json.loads(json.dumps(doc))
    paths = [p for p in _paths(doc) if p]
    kind = draw(st.sampled_from(["drop", "retype", "retype", "duplicate_key", "deep"]))
    if kind == "deep":
        return b"[" * DEEP + b"]" * DEEP if draw(st.booleans()) else json.dumps({"wrapped": doc}).encode()
    if kind == "duplicate_key" or not paths:
        text = json.dumps(doc)
        key = next(iter(doc), "k") if isinstance(doc, dict) else "k"
        return ("{" + json.dumps(key) + ": null, " + text[1:]).encode() if text.startswith("{") else text.encode()
    path = draw(st.sampled_from(paths))
    parent = _get(doc, path[:-1])
    if kind == "drop":
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(st.sampled_from(RETYPES))
    return json.dumps(doc).encode()


def judge(reader: str, call, errors: tuple[type[Exception], ...], names: list[str]) -> bool:
    """Run the reader on a mutated input: True when it accepted; on a refusal, the error must be one
    of `errors` and name one of `names` (the file it read). Anything else propagates and fails."""
    try:
        call()
    except errors as exc:
        message = str(exc)
        assert any(name in message for name in names), f"{reader}: a refusal that names no file: {message}"
        record(reader, f"refused: {type(exc).__name__}")
        return False
    record(reader, "accepted")
    return True
