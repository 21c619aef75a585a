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

from apsft_dagster.core.embedded.cache import code_digest
from apsft_dagster.core.loss_mask.flags_file import ExternalFlags
from apsft_dagster.core.loss_mask.formats import MESSAGES_KEY, canonical_row
from apsft_dagster.core.loss_mask.rules import DEFAULT_PROSE_COMMANDS, LossMaskError, flag_row
from apsft_dagster.core.loss_mask.splice import mask_in_place
from apsft_dagster.core.loss_mask.streams import BlockSink, Hasher, HashThread, hashed_lines

MASK_KEY = "step_loss_mask"

# the files of core/loss_mask that decide which turns are masked and where the mask goes (build.json's code digest)
RULE_CODE = tuple(f"core/loss_mask/{part}" for part in (
    "rules.py", "terminus.py", "tool_calls.py", "fast_schema.py", "formats", "build.py", "splice.py", "flags_file.py"))


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
          prose_commands: frozenset[str] | None = None, digests: bool = True, fmt: str = "native",
          source_name: str = "<lines>", first_line: int = 1, flags: ExternalFlags | None = None) -> dict:
    """Mask the flagged turns of every row; return the build report (counts and digests).
    `lines` is an iterable of lines or a binary file (read and hashed in blocks: streams.py), rows in
    format `fmt` (formats/; the mask goes into the row's own message array). With `flags`, the turns
    masked are exactly the external flags file's, not the rules'.
    A range of a file passes `expected_reasons=None` (its caller compares the sum and checks every
    external flag was used: the report's `flagged_rows`) and may pass `digests=False` (its caller
    hashes the joined files; the report's digests are then empty)."""
    thread = HashThread() if digests else None
    flags_from = flags
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
        where = (source_name, first_line, fmt, flags_from)
        report = _build(stream, output, flags, expected_reasons, known_broken_families, prose_commands, where)
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
           known_broken_families: frozenset[str], prose_commands: frozenset[str] | None, where: tuple) -> dict:
    source_name, first_line, fmt, external = where
    array = MESSAGES_KEY[fmt]
    combinations: dict[frozenset[str], int] = {}  # each distinct reason set -> masked turns
    rows, flagged_rows = 0, set()
    for number, line in enumerate(lines, start=first_line):
        if not line or line.isspace():  # blank: `not line.strip()` without copying the line
            continue
        row = canonical_row(json.loads(line), fmt, where=f"{source_name} line {number}")
        rows += 1
        if external is None:
            found = flag_row(row, known_broken_families=known_broken_families, prose_commands=prose_commands)
        else:
            found = external.for_row(row, content_sha256)
            flagged_rows.update([row["row_id"]] if found else [])
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
        masked = mask_in_place(line, indices, len(row["messages"]), row["row_id"], MASK_KEY, array)
        output.write(masked if masked.endswith(b"\n") else masked + b"\n")
    reasons = Counter()
    for why, n in combinations.items():
        reasons.update(dict.fromkeys(why, n))
    if expected_reasons is not None:
        if external is not None:
            external.check_all_used(flagged_rows)
        check_reasons(dict(reasons), expected_reasons, external)
    report = {"rows": rows, "masked_turns": sum(combinations.values()), "reasons": dict(sorted(reasons.items()))}
    return report if expected_reasons is not None or external is None else {**report, "flagged_rows": flagged_rows}


def check_reasons(reasons: dict[str, int], expected: dict[str, int], external: ExternalFlags | None) -> None:
    if dict(sorted(reasons.items())) != dict(sorted(expected.items())):
        counted = "the census counted" if external is None else f"the flags file {external.path} holds"
        raise LossMaskError(f"build masked {dict(sorted(reasons.items()))} but {counted} "
                            f"{dict(sorted(expected.items()))}; the input changed or the rules differ")


def build_problems(report: dict, counted: dict) -> list[str]:
    """The build's gate: rows in = rows out, and masked turns per reason = the census's counts."""
    return ([f"{report['rows']} rows out, the census read {counted['rows']}"] * (report["rows"] != counted["rows"])
            + [f"masked {report['reasons']}, the census counted {counted['reasons']}"]
            * (report["reasons"] != counted["reasons"]))


def rules_record(settings, counted: dict) -> dict:
    """build.json's account of the rules: their settings, which ran and which were skipped on how many
    rows (from the census total), and the SHA-256 of the code that decides the masks."""
    commands = DEFAULT_PROSE_COMMANDS if settings.prose_commands is None else settings.prose_commands
    return {"known_broken_families": sorted(settings.known_broken_families), "prose_commands": sorted(commands),
            "prose_commands_default": settings.prose_commands is None, "ran": counted.get("ran", {}),
            "skipped": counted.get("skipped", {}), "code_digest": code_digest(RULE_CODE), "code_parts": list(RULE_CODE)}
