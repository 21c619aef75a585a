"""The verification: reads base, output and flags back from disk and proves the build did only
what the flags say. Written apart from the build, so a bug in one is not repeated in the other.

Checks, row by row in lockstep: the same row ids in the same order; the base carries no mask of
its own; the output row equals its input row once the mask keys are removed, and in bytes: an
untouched row is its input line, a masked row is its input line plus one `"step_loss_mask": 0`
member per mask and not one other byte; every mask sits on
an assistant message listed in the flags with the recorded content digest, and every flag is
used; a false-claim mask sits on the row's last assistant message of a trusted failure.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

from apsft_dagster.core.loss_mask.formats import MESSAGES_KEY, canonical_row
from apsft_dagster.core.loss_mask.rules import LossMaskError
from apsft_dagster.core.loss_mask.streams import LINE_BUFFER

MASK_KEY = "step_loss_mask"


class VerifyError(LossMaskError):
    """The built file differs from what the flags and the base allow (names the row)."""


# The member a mask adds, as spelt in a row written with ", "/": " separators or compactly.
_MEMBERS = (f', "{MASK_KEY}": 0'.encode(), f',"{MASK_KEY}":0'.encode())


def _rows(path: Path, fmt: str = "native"):
    """(line without its line end, parsed row, the row as the rules read it) for each non-blank line."""
    with open(path, "rb", buffering=LINE_BUFFER) as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                row = json.loads(line)
                yield line.rstrip(b"\r\n"), row, canonical_row(row, fmt, where=f"{path} line {number}")


def _bytes_match(before: bytes, after: bytes, masks: int) -> bool:
    """After is before with exactly `masks` mask members added (nothing else differs)."""
    if not masks:
        return after == before
    for member in _MEMBERS:
        if after.count(member) - before.count(member) == masks:
            return after.replace(member, b"") == before.replace(member, b"")
    return False


def _strip(row: dict, array: str) -> dict:
    return {**row, array: [{k: v for k, v in m.items() if k != MASK_KEY} if isinstance(m, dict) else m
                           for m in row[array]]}


def _trusted_failure(verifier: dict, known_broken: frozenset[str]) -> bool:
    reward = verifier.get("reward")
    return (verifier.get("passed") is False and isinstance(reward, (int, float)) and not isinstance(reward, bool)
            and verifier.get("infra_exception") is False and verifier.get("family") not in known_broken)


def verify(base: Path, output: Path, flags: Path, *, known_broken_families: frozenset[str] = frozenset(),
           fmt: str = "native", rule_flags: bool = True) -> dict:
    """Every check above for rows in format `fmt` (formats/: the masks sit in the row's own message
    array; message i there is message i of the rules' row); raises VerifyError naming the first row
    that fails, else the counts. `rule_flags=False` (a build from an external flags file) drops the
    false-claim check, which holds for the rules' flags only."""
    listed: dict[tuple[str, int], dict] = {}
    for _, flag, _ in _rows(flags):
        listed[(flag["row_id"], flag["message_index"])] = flag
    used, rows, spliced, array = 0, 0, 0, MESSAGES_KEY[fmt]
    for pair_before, pair_after in itertools.zip_longest(_rows(base, fmt), _rows(output, fmt)):
        if pair_before is None or pair_after is None:
            missing = "output" if pair_after is None else "base"
            row = (pair_before or pair_after)[2]
            raise VerifyError(f"row {row['row_id']!r}: no counterpart in the {missing} (row counts differ)")
        (line_before, before, canonical), (line_after, after, masked) = pair_before, pair_after
        rid = canonical["row_id"]
        if masked["row_id"] != rid:
            raise VerifyError(f"row {rid!r}: the output has {masked['row_id']!r} at this position")
        if any(MASK_KEY in m for m in canonical["messages"]):
            raise VerifyError(f"row {rid!r}: the base already carries {MASK_KEY}")
        if _strip(after, array) != before:
            raise VerifyError(f"row {rid!r}: differs from its input beyond {MASK_KEY}")
        masks = sum(MASK_KEY in m for m in after[array])
        if not _bytes_match(line_before, line_after, masks):
            raise VerifyError(f"row {rid!r}: its bytes differ from the input line beyond the {masks} added "
                              f"{MASK_KEY} member(s)")
        spliced += bool(masks)
        assistants = [i for i, m in enumerate(masked["messages"]) if m.get("role") == "assistant"]
        for i, message in enumerate(masked["messages"]):
            if MASK_KEY not in message:
                continue
            flag = listed.get((rid, i))
            if message.get("role") != "assistant" or flag is None or message[MASK_KEY] != 0:
                raise VerifyError(f"row {rid!r}: message {i} ({message.get('role')}) is masked without a flag")
            digest = hashlib.sha256(json.dumps(message.get("content"), ensure_ascii=False).encode()).hexdigest()
            if digest != flag["content_sha256"]:
                raise VerifyError(f"row {rid!r}: message {i} content does not match its flag's digest")
            if rule_flags and "false-claim" in flag["reasons"] and (i != assistants[-1] or not _trusted_failure(
                    canonical.get("verifier", {}), known_broken_families)):
                raise VerifyError(f"row {rid!r}: message {i} masked as false-claim where the rule does not allow it")
            used += 1
        rows += 1
    if used != len(listed):
        raise VerifyError(f"{len(listed) - used} flags name turns the output does not mask")
    return {"rows": rows, "masked_turns": used, "rows_byte_identical": rows - spliced, "rows_masked_in_place": spliced}
