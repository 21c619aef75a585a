"""An external flags file (a classifier's staged verdicts) the build masks from instead of the rules.

JSON lines `{"row_id": str, "message_index": int, "reasons": [str, ...], "content_sha256": hex}`
(`content_sha256` optional; when given it must be the SHA-256 of the turn's content as the build's
own flags record it: its JSON text, content parts joined). Read whole at registration (shape, no
turn named twice) and again at build time, when its SHA-256 must still be the registered one; the
build then masks exactly those turns and stops, naming the file, line and field, on a flag whose
row is not in the dataset, whose turn is not an assistant turn, or whose digest differs.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from apsft_dagster.core.json_input import parse_json
from apsft_dagster.core.loss_mask.rules import LossMaskError
from apsft_dagster.core.store import sha256_file

_HEX = re.compile(r"[0-9a-f]{64}")


class ExternalFlags:
    """(row id, message index) -> (line number, reasons, content digest or None), and the file's counts."""

    def __init__(self, path: str | Path, sha256: str | None = None):
        self.path = Path(path)
        if sha256 is not None and sha256_file(self.path) != sha256:
            raise LossMaskError(f"flags file {self.path}: hashes differently from its registration "
                                f"({sha256[:12]}...); it changed since. Re-register it with `apsft loss-mask add "
                                "NAME PATH --flags FILE`")
        # row id -> message index -> (line number, reasons, content digest or None)
        self.by_row: dict[str, dict[int, tuple[int, tuple[str, ...], str | None]]] = {}
        with open(self.path, "rb") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    self._add(number, parse_json(line, f"flags file {self.path} line {number}", LossMaskError))

    def _fail(self, number: int, field: str, problem: str) -> LossMaskError:
        return LossMaskError(f"flags file {self.path} line {number}: field {field!r} {problem}; fix the flags file "
                             "and register it again")

    def _add(self, number: int, flag: object) -> None:
        if not isinstance(flag, dict):
            raise self._fail(number, "(line)", "must be a JSON object")
        row_id, index, reasons = flag.get("row_id"), flag.get("message_index"), flag.get("reasons")
        digest = flag.get("content_sha256")
        if not isinstance(row_id, str) or not row_id:
            raise self._fail(number, "row_id", "must be a non-empty string")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise self._fail(number, "message_index", "must be an integer >= 0")
        if not isinstance(reasons, list) or not reasons or not all(isinstance(r, str) and r for r in reasons):
            raise self._fail(number, "reasons", "must be a non-empty list of non-empty strings")
        if digest is not None and not (isinstance(digest, str) and _HEX.fullmatch(digest)):
            raise self._fail(number, "content_sha256", "must be 64 lowercase hex digits (or absent)")
        turns = self.by_row.setdefault(row_id, {})
        if index in turns:
            raise self._fail(number, "message_index",
                             f"names row {row_id!r} turn {index} again (line {turns[index][0]})")
        turns[index] = (number, tuple(sorted(set(reasons))), digest)

    def counts(self) -> dict:
        """What a build from this file must mask: turns, and turns per reason."""
        flags = [flag for turns in self.by_row.values() for flag in turns.values()]
        reasons = Counter(r for _, why, _ in flags for r in why)
        return {"masked_turns": len(flags), "reasons": dict(sorted(reasons.items()))}

    def for_row(self, row: dict, digest_of) -> dict[int, frozenset[str]]:
        """The row's flagged turns; each must be an assistant turn whose content matches any digest
        given (`digest_of(content)`)."""
        row_id, found, messages = row["row_id"], {}, row["messages"]
        for index, (number, reasons, digest) in self.by_row.get(row_id, {}).items():
            if index >= len(messages) or messages[index].get("role") != "assistant":
                role = messages[index].get("role") if index < len(messages) else "none: the row has fewer"
                raise self._fail(number, "message_index", f"names turn {index} of row {row_id!r}, which is not an "
                                 f"assistant turn ({role})")
            if digest is not None and digest != digest_of(messages[index].get("content")):
                raise self._fail(number, "content_sha256", f"does not match row {row_id!r} turn {index}'s content")
            found[index] = frozenset(reasons)
        return found

    def check_all_used(self, seen_rows: set[str]) -> None:
        """Every flag's row was in the dataset (`seen_rows`: the row ids the build read)."""
        missing = [(min(n for n, _, _ in turns.values()), row_id) for row_id, turns in self.by_row.items()
                   if row_id not in seen_rows]
        if missing:
            number, row_id = min(missing)
            raise self._fail(number, "row_id", f"{row_id!r} names no row of the dataset")
