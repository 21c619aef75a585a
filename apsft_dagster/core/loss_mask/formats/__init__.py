"""The chat formats a loss-mask dataset may be written in, mapped to the one shape the rules read.

`canonical_row(row, fmt, where=...)` gives the row as the rules and the pack read it: `row_id`,
`messages` (OpenAI-style: role system/user/assistant/tool, string-or-null `content`, `tool_calls`
as given, `reasoning_content` and `step_loss_mask` kept), `tools` when present, and `harness`,
`verifier`, `source` only when the source has them; a ShareGPT row's top-level `system` string is
kept as `system` (it is not a message: message i of the canonical row IS message i of the source
row, so a mask index found on one is the index to splice into the other). The source row is
never changed and never written back: the build splices masks into its own bytes.

Formats: `native` (this project's rows: OpenAI messages with `row_id`; identity), `openai`
(OpenAI / vLLM / HF chat JSONL: content parts, the legacy `function` role and `function_call`,
`id` or the line number as row id) and `sharegpt` (`conversations` of from/value, LLaMA-Factory's
conventions). A Hugging Face dataset folder or Parquet file is staged to JSON lines at
registration (staging.py) and then read as `openai` (a `messages` column) or `sharegpt`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from apsft_dagster.core.loss_mask.formats import openai, sharegpt
from apsft_dagster.core.loss_mask.rules import LossMaskError

FORMATS = ("native", "openai", "sharegpt")
# the key of each format's message array in the source row (the one the build splices into)
MESSAGES_KEY = {"native": "messages", "openai": "messages", "sharegpt": "conversations"}
_LINE = re.compile(r"line (\d+)\b")
_PEEK_ROWS = 20


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise LossMaskError(f"format {fmt!r} is not one of {list(FORMATS)}; pass --format with one of them")
    return fmt


def canonical_row(row: dict, fmt: str, *, where: str) -> dict:
    """The row in the rules' shape (see the module doc); `where` ("FILE line N") names the place in
    errors and gives the row id `line-000000N` to a row with neither `row_id` nor `id`."""
    if fmt == "native":
        return row
    if not isinstance(row, dict):
        raise LossMaskError(f"{where}: a row must be a JSON object, got {type(row).__name__}; fix the export")
    line = _LINE.search(where)
    fallback = f"line-{int(line.group(1)):07d}" if line else None
    if fmt == "openai":
        return openai.canonical(row, where, fallback)
    if fmt == "sharegpt":
        return sharegpt.canonical(row, where, fallback)
    raise LossMaskError(f"{where}: format {fmt!r} is not one of {list(FORMATS)}; pass --format with one of them")


def row_id_source(row: dict, fmt: str) -> str:
    """Where a row's id comes from: `row_id`, `id` or `line` (the line number)."""
    if fmt == "native" or isinstance(row.get("row_id"), str):
        return "row_id"
    return "id" if isinstance(row.get("id"), (str, int)) and not isinstance(row.get("id"), bool) else "line"


def detect_rows(rows: list[dict]) -> str:
    """The format of these first rows: `sharegpt` if they hold `conversations`, `native` if each has
    a string `row_id` and plain OpenAI messages (string-or-null content, the four roles, no
    `function_call`), else `openai`."""
    if rows and all(isinstance(r, dict) and "conversations" in r and "messages" not in r for r in rows):
        return "sharegpt"
    if rows and all(_is_native(r) for r in rows):
        return "native"
    return "openai"


def _is_native(row: object) -> bool:
    if not isinstance(row, dict) or not isinstance(row.get("row_id"), str) or not isinstance(row.get("messages"), list):
        return False
    return all(isinstance(m, dict) and m.get("role") in ("system", "user", "assistant", "tool")
               and (m.get("content") is None or isinstance(m.get("content"), str)) and "function_call" not in m
               for m in row["messages"])


def detect_format(path: str | Path) -> str:
    """The format of a JSON-lines file from its first rows (a folder or .parquet: the format of its
    staged rows, from its columns)."""
    path = Path(path)
    if path.is_dir() or path.suffix == ".parquet":
        from apsft_dagster.core.loss_mask.formats.staging import columns

        return "sharegpt" if "conversations" in columns(path) and "messages" not in columns(path) else "openai"
    return detect_rows([row for _, row in first_rows(path)])


def first_rows(path: Path) -> list[tuple[int, object]]:
    """(line number, parsed row) of the file's first rows (blank lines skipped)."""
    rows = []
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    rows.append((number, json.loads(line)))
                except ValueError as exc:
                    raise LossMaskError(f"{path} line {number}: not JSON ({exc}); fix the line") from None
            if len(rows) >= _PEEK_ROWS:
                break
    return rows


def check_first_rows(path: Path, fmt: str) -> None:
    """The first rows read in `fmt` (a wrong --format stops registration, naming line and field)."""
    for number, row in first_rows(path):
        canonical_row(row, fmt, where=f"{path} line {number} (read as {fmt}; --format picks another)")
