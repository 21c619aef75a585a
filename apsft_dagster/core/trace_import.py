"""`apsft import-traces`: traces sampled elsewhere (vLLM, a harness) read, matched to the catalog's train tasks
and judged as a harvest judges its own (docs/import-traces.md).

A file is JSONL or Parquet, one completion a row: the task by `task_id` or `prompt` (the task's prompt, or
the protocol's rendering of it, which ends with the thought's open line), the completion (the text after
that line) in `completion`, `text` or `output`, and optionally vLLM's `finish_reason` (`length` or `stop`).
A completion's thought ends at the protocol's close (or, never closed, at its end of turn); each is
tokenized with the profile's tokenizer and made into the harvest's row by the harvest's own function, in
the harvest's batches: the main batch first, a top-up batch only while fewer than `min_eligible` are
eligible. What the file does not hold (the seeds, whether a sample was continued, the sampled token ids)
is null or recomputed in the bank and named as such in each shard's key (`imported`), never made up.
Every problem is found before anything is written (core/trace_import_store.py writes).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from apsft_dagster.core.config import Harvest
from apsft_dagster.core.engines.base import Completion
from apsft_dagster.core.errors import TraceImportError
from apsft_dagster.core.harvest import TRACE_SCHEMA, HarvestTask, _row, batch_plan
from apsft_dagster.core.json_input import parse_json
from apsft_dagster.core.protocol import IM_END, THINK_CLOSE
from apsft_dagster.core.store import sha256_bytes

TASK_FIELDS = ("task_id", "prompt")
COMPLETION_FIELDS = ("completion", "text", "output")
FINISH_REASONS = {"length": "length", "stop": "end_of_turn"}  # vLLM's words -> the bank's, for a thought not closed
# The bank's columns an imported trace leaves null, and those recomputed from the text here: each shard's key says so.
MISSING = {"seed": "not in the file: no apsft batch seed sampled it",
           "continuation_seed": "not in the file: no apsft continuation",
           "continued": "not in the file: whether the sampler continued a sample"}
FINISH_MISSING = "not in the file for every thought left open: `length` or `stop` (null where absent)"
RECOMPUTED = {"token_ids": "the profile's tokenizer's ids of the thought and its close, not the sampled ids",
              "token_sha256": "of the recomputed token_ids"}
SHOWN = 20  # problems listed in one refusal


@dataclass(frozen=True)
class Item:
    """One completion of the file, matched to its task."""

    where: str  # "line N" (JSONL) or "row N" (Parquet), N from 1
    task_id: str
    completion: str
    finish_reason: str | None


def split_completion(completion: str, close: str = THINK_CLOSE, end: str = IM_END) -> tuple[str, str]:
    """(thought, the marker that ended it): the text before the first `close` (a natural close) or `end` (the
    model ended its turn with the thought open), whichever comes first; '' when neither is there. Whatever
    follows (an answer) is not the thought: the record's answer is the task's own."""
    found = [(completion.find(marker), marker) for marker in (close, end) if marker in completion]
    if not found:
        return completion, ""
    at, marker = min(found)
    return completion[:at], marker


def refuse(problems: list[str], way_out: str) -> None:
    if problems:
        more = f"\n  ... and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
        raise TraceImportError("\n  ".join(["traces refused; nothing was written:", *problems[:SHOWN]]) + more +
                               f"\n{way_out}")


def read_rows(path: Path) -> tuple[list[tuple[str, dict]], str]:
    """The file's rows, each with where it is ("line N" or "row N"), and the file's SHA-256."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceImportError(f"{path}: cannot be read ({exc.strerror or exc}); nothing was written") from None
    if data[:4] == b"PAR1":
        try:
            frame = pl.read_parquet(io.BytesIO(data))
        except Exception as exc:  # polars raises its own types for every kind of bad file  # noqa: BLE001
            raise TraceImportError(f"{path}: not a readable Parquet file ({type(exc).__name__}); nothing was "
                                   "written. Write it again, or as JSONL") from None
        rows = [(f"row {n}", row) for n, row in enumerate(frame.iter_rows(named=True), start=1)]
    else:
        rows, problems = [], []
        for n, line in enumerate(data.split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                row = parse_json(line, f"{path}: line {n}", TraceImportError)
            except TraceImportError as exc:
                problems.append(str(exc))
                continue
            if not isinstance(row, dict):
                problems.append(f"{path}: line {n}: not a JSON object (one row a line)")
                continue
            rows.append((f"line {n}", row))
        refuse(problems, "Each line is one JSON object: {\"task_id\" or \"prompt\": ..., \"completion\": ...}")
    if not rows:
        raise TraceImportError(f"{path}: no rows; nothing was written")
    return rows, sha256_bytes(data)


def match(path: Path, rows: list[tuple[str, dict]], catalog: pl.DataFrame, render, inherited) -> list[Item]:
    """Each row as an Item of a train task; TraceImportError naming every row and field that is not one (an
    unknown task or prompt, a sealed task, an inherited one, no completion, an unknown finish reason)."""
    by_id = {r["task_id"]: r for r in catalog.iter_rows(named=True)}
    by_prompt: dict[str, list[str]] = {}
    for task in by_id.values():
        for text in {task["prompt"], render(task["prompt"])}:
            by_prompt.setdefault(text, []).append(task["task_id"])
    items, problems = [], []
    for where, row in rows:
        task_id, problem = _task_of(row, by_id, by_prompt)
        if task_id is not None and by_id[task_id]["split"] != "train":
            problem = (f"task {task_id} is in the sealed split {by_id[task_id]['split']}: the firewall forbids "
                       "traces of sealed tasks; leave the row out")
        elif task_id is not None and inherited and task_id in inherited:
            problem = f"task {task_id} is inherited (harvest.inherited_index): its shard comes from that bank"
        completion, finish, bad = _completion_of(row)
        found = [p for p in (problem, bad) if p]
        problems += [f"{path}: {where}: {p}" for p in found]
        if not found:
            items.append(Item(where, task_id, completion, finish))
    refuse(problems, f"Name each row's task by `task_id` or its exact `prompt` (train tasks only) and give its "
                     f"completion in one of {', '.join(COMPLETION_FIELDS)}.")
    return items


def _task_of(row: dict, by_id: dict, by_prompt: dict) -> tuple[str | None, str | None]:
    task_id, prompt = row.get("task_id"), row.get("prompt")
    if task_id is None and prompt is None:
        return None, f"no field {' or '.join(map(repr, TASK_FIELDS))}: which task is this?"
    for name, value in (("task_id", task_id), ("prompt", prompt)):
        if value is not None and not isinstance(value, str):
            return None, f"field {name!r}: {type(value).__name__}, not text"
    if task_id is not None and task_id not in by_id:
        return None, f"field 'task_id': unknown task {task_id!r} (not in the profile's catalog)"
    if prompt is not None:
        matched = by_prompt.get(prompt, [])
        if task_id is not None and task_id not in matched:
            return None, f"fields 'task_id' and 'prompt': the prompt is not task {task_id}'s"
        if task_id is None and len(matched) != 1:
            return None, ("field 'prompt': matches no task's prompt in the profile's catalog, nor its rendering" if
                          not matched else f"field 'prompt': matches tasks {matched}; name one by 'task_id'")
        task_id = task_id or matched[0]
    return task_id, None


def _completion_of(row: dict) -> tuple[str, str | None, str | None]:
    """(completion, the bank's finish reason or None, the problem or None)."""
    given = [name for name in COMPLETION_FIELDS if row.get(name) is not None]
    if len(given) != 1:
        return "", None, (f"no completion (field {' | '.join(COMPLETION_FIELDS)})" if not given else
                          f"fields {' and '.join(map(repr, given))} both given: keep the completion in one")
    completion, finish = row[given[0]], row.get("finish_reason")
    if not isinstance(completion, str):
        return "", None, f"field {given[0]!r}: {type(completion).__name__}, not text"
    if finish is not None and finish not in FINISH_REASONS:
        return "", None, f"field 'finish_reason': {finish!r}, not one of {', '.join(FINISH_REASONS)}"
    return completion, None if finish is None else FINISH_REASONS[finish], None


def task_shard(tokenizer, protocol, task: HarvestTask, items: list[Item], cfg: Harvest) -> tuple[pl.DataFrame, list]:
    """The task's trace rows (TRACE_SCHEMA) in the harvest's batches, and the items beyond what it would keep."""
    close_id = tokenizer.convert_tokens_to_ids(protocol.think_close)
    prompt_text = protocol.format_prompt(task.prompt)
    rows, at = [], 0
    for batch, n in batch_plan(cfg):  # the harvest's own rule: a top-up only while too few are eligible
        if at == len(items) or (batch != "main" and sum(r["eligible"] for r in rows) >= cfg.min_eligible):
            break
        for index, item in enumerate(items[at:at + n]):
            rows.append(_trace(tokenizer, protocol, task, prompt_text, batch, index, item, close_id, cfg))
        at += min(n, len(items) - at)
    excluded = sum(r["eligible"] for r in rows) < cfg.min_eligible
    return pl.DataFrame([{**r, "task_excluded": excluded} for r in rows], schema=TRACE_SCHEMA), items[at:]


def _trace(tokenizer, protocol, task: HarvestTask, prompt_text: str, batch: str, index: int, item: Item,
           close_id: int, cfg: Harvest) -> dict:
    """One trace, by the harvest's `_row` on the completion's ids: the thought tokenized alone (the sampler
    continued the prompt's ids), then its marker; no seed, no continuation."""
    thought, marker = split_completion(item.completion, protocol.think_close, protocol.end)
    ids = tokenizer(thought, add_special_tokens=False)["input_ids"]
    ids += tokenizer(marker, add_special_tokens=False)["input_ids"] if marker else []
    sample = Completion(tuple(ids), "length" if not marker and item.finish_reason == "length" else "stop")
    row = _row(tokenizer, task, prompt_text, batch, index, None, sample, None, close_id, cfg)
    finish = row["finish_reason"] if marker else item.finish_reason
    return {**row, "continued": None, "finish_reason": finish}


def missing(frames: dict[str, pl.DataFrame]) -> dict:
    """What the bank's rows of this file lack (null) and hold recomputed: the `imported` part of each key."""
    open_without = any(f.filter(~pl.col("closed") & pl.col("finish_reason").is_null()).height for f in frames.values())
    return {"missing": {**MISSING, **({"finish_reason": FINISH_MISSING} if open_without else {})},
            "recomputed": RECOMPUTED}
