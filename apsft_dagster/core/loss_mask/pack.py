"""Packing: every row rendered with its loss mask (spans.py), packed into fixed-length training
sequences, and the comparison with the unmasked base packed the same way.

Packing rule: rows are placed in a seeded permutation of the input order (the same permutation of
all input rows for a masked build and its base, so they differ only by the rows one of them
drops), each into the first open pack with room (first fit). A full pack closes; at most
MAX_OPEN_PACKS stay open, the oldest closing when another must open, so placement stays linear.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable

import numpy as np
import polars as pl

from apsft_dagster.core.json_input import parse_json
from apsft_dagster.core.loss_mask.rules import ROLES, LossMaskError
from apsft_dagster.core.loss_mask.spans import chat_template_for, checked, encode_row

MAX_OPEN_PACKS = 64
NO_TRAINABLE, OVER_LIMIT = "no_trainable", "over_limit"
COMPARED = ("rows_in", "rows_packed", "packs", "tokens", "efficiency", "rows_over_limit", "rows_no_trainable")
SAME_INPUT = ("rows_in", "pack_length", "shards", "seed", "chat_template_sha256")  # a comparison needs these equal
SCHEMA = {"pack_id": pl.Int64, "input_ids": pl.List(pl.Int32), "loss_mask": pl.List(pl.UInt8),
          "position_ids": pl.List(pl.Int32), "row_ids": pl.List(pl.String), "seq_lens": pl.List(pl.Int32)}


def _parse(line: bytes, number: int, seen: dict[str, int]) -> dict:
    """The fields packing reads, checked; a duplicate row id would make the drop accounting ambiguous."""
    row = parse_json(line, f"line {number}", LossMaskError)
    rid = row.get("row_id") if isinstance(row, dict) else None
    if not isinstance(rid, str):
        raise LossMaskError(f"line {number}: field 'row_id' must be a string; fix the row")
    if rid in seen:
        raise LossMaskError(f"row {rid!r}: appears on lines {seen[rid]} and {number}; row ids must be unique")
    seen[rid] = number
    messages = row.get("messages")
    if not messages or not isinstance(messages, list) or not all(isinstance(m, dict) and m.get("role") in ROLES
                                                                 and isinstance(m.get("content"), (str, type(None)))
                                                                 for m in messages):
        raise LossMaskError(f"row {rid!r}: field 'messages' must be a non-empty list of messages with a role in "
                            f"{sorted(ROLES)} and string or null content; fix the row")
    return row


def place(lengths: list[tuple[int, int]], pack_length: int, max_open: int = MAX_OPEN_PACKS) -> list[list[int]]:
    """First fit of (row, length) pairs, in the order given, over at most `max_open` open packs."""
    packs: list[list[int]] = []
    free, open_ids = [], []  # by pack id: room left; the ids of the open packs, oldest first
    for row, length in lengths:
        pid = next((p for p in open_ids if free[p] >= length), None)
        if pid is None:
            if len(open_ids) == max_open:
                open_ids.pop(0)  # the oldest open pack closes, so the search stays bounded
            pid = len(packs)
            packs.append([])
            free.append(pack_length)
            open_ids.append(pid)
        packs[pid].append(row)
        free[pid] -= length
        if free[pid] == 0:
            open_ids.remove(pid)
    return packs


def _pack_row(pid: int, members: list[int], rows: list, pack_length: int, pad_id: int) -> dict:
    """One output row: the members' tokens end to end, then pad (loss 0, positions from 0 again)."""
    lens = [len(rows[r][1]) for r in members]
    pad = pack_length - sum(lens)
    return {"pack_id": pid,
            "input_ids": np.concatenate([rows[r][1] for r in members] + [np.full(pad, pad_id, np.int32)]),
            "loss_mask": np.concatenate([rows[r][2] for r in members] + [np.zeros(pad, np.uint8)]),
            "position_ids": np.concatenate([np.arange(n, dtype=np.int32) for n in [*lens, pad]]),
            "row_ids": [rows[r][0] for r in members], "seq_lens": lens}


def _frames(packs: list[list[int]], rows: list, pack_length: int, shards: int, pad_id: int) -> list[pl.DataFrame]:
    """Pack p goes to shard p % shards; pack ids ascend within each shard."""
    frames = []
    for shard in range(shards):
        built = [_pack_row(p, packs[p], rows, pack_length, pad_id) for p in range(shard, len(packs), shards)]
        frames.append(pl.DataFrame({k: [b[k] for b in built] for k in SCHEMA}, schema=SCHEMA))
    return frames


def _encode_all(lines: Iterable[bytes], tokenizer, template: str, pack_length: int) -> tuple[list, list, dict]:
    """(rows: (row_id, ids, mask) or None where dropped, dropped records, token tallies of the kept rows)."""
    rows, dropped, seen = [], [], {}
    tally = {"trainable_tokens": 0, "masked_assistant_tokens": 0}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        row = _parse(line, number, seen)
        encoded = checked(row["row_id"], encode_row(row, tokenizer, template))
        trainable = sum(encoded.loss_mask)
        # Over the limit first: length does not depend on masking, so base and build drop the same rows.
        reason = OVER_LIMIT if len(encoded.input_ids) > pack_length else NO_TRAINABLE if not trainable else None
        if reason:
            dropped.append({"row_id": row["row_id"], "reason": reason, "tokens": len(encoded.input_ids)})
            rows.append(None)
            continue
        tally["trainable_tokens"] += trainable
        tally["masked_assistant_tokens"] += encoded.masked_assistant
        rows.append((row["row_id"], np.asarray(encoded.input_ids, np.int32), np.asarray(encoded.loss_mask, np.uint8)))
    return rows, dropped, tally


def pack_rows(lines: Iterable[bytes], tokenizer, *, pack_length: int, shards: int, seed: int,
              chat_template: str | None = None) -> tuple[list[pl.DataFrame], dict]:
    """(one Polars frame per shard, the pack report). The token figures count what the packs hold;
    rows dropped (over the limit first, then with nothing to train) are listed with their lengths."""
    if pack_length < 1 or shards < 1:
        raise LossMaskError(f"pack_length ({pack_length}) and shards ({shards}) must be positive; fix the config")
    if tokenizer.pad_token_id is None:
        raise LossMaskError("the tokenizer has no pad token; packs are padded with it, so set one")
    template = chat_template_for(tokenizer, chat_template)
    rows, dropped, tally = _encode_all(lines, tokenizer, template, pack_length)
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)  # the same permutation of all input rows, dropped ones skipped
    packs = place([(r, len(rows[r][1])) for r in order if rows[r] is not None], pack_length)
    tokens = sum(len(r[1]) for r in rows if r is not None)
    report = {
        "rows_in": len(rows), "rows_packed": sum(len(p) for p in packs), "packs": len(packs), "tokens": tokens,
        "pad_tokens": len(packs) * pack_length - tokens, "efficiency": tokens / (len(packs) * pack_length or 1),
        **tally,
        "loss_coverage": tally["trainable_tokens"] / tokens if tokens else 0.0,
        "rows_no_trainable": sum(d["reason"] == NO_TRAINABLE for d in dropped),
        "rows_over_limit": sum(d["reason"] == OVER_LIMIT for d in dropped),
        "dropped": sorted(dropped, key=lambda d: d["row_id"]), "span_anomalies": 0,  # any anomaly raised above
        "pack_length": pack_length, "shards": shards, "seed": seed,
        "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest(),
    }
    return _frames(packs, rows, pack_length, shards, tokenizer.pad_token_id), report


def _drop_problems(base: dict, masked: dict) -> list[str]:
    """Every row the masked build packs less must be one it dropped for having nothing to train."""
    before = {d["row_id"]: d for d in base["dropped"]}
    after = {d["row_id"]: d for d in masked["dropped"]}
    problems = []
    over = {r for r, d in before.items() if d["reason"] == OVER_LIMIT}
    if over != {r for r, d in after.items() if d["reason"] == OVER_LIMIT}:
        problems.append(f"rows_over_limit: base drops {len(over)} rows over the limit, masked "
                        f"{masked['rows_over_limit']}, or not the same row ids")
    if regained := sorted(set(before) - set(after)):
        problems.append(f"rows dropped in base but packed in masked: {regained[:5]}")
    lost = [after[r] for r in sorted(set(after) - set(before))]
    if wrong := [d["row_id"] for d in lost if d["reason"] != NO_TRAINABLE]:
        problems.append(f"rows packed in base but dropped in masked for another reason than {NO_TRAINABLE}: "
                        f"{wrong[:5]}")
    if base["rows_packed"] - masked["rows_packed"] != len(lost):
        problems.append(f"rows_packed: base - masked = {base['rows_packed'] - masked['rows_packed']} but "
                        f"{len(lost)} rows are dropped only in masked")
    lost_tokens = sum(d["tokens"] for d in lost)
    if base["tokens"] - masked["tokens"] != lost_tokens:
        problems.append(f"tokens: base - masked = {base['tokens'] - masked['tokens']} but the rows dropped only in "
                        f"masked hold {lost_tokens} tokens")
    return problems


def pack_comparison(base: dict, masked: dict) -> dict:
    """The table base vs masked with deltas (masked - base), and whether every difference is accounted for
    by rows the masked build dropped because every assistant turn in them is masked."""
    table = [{"metric": k, "base": base[k], "masked": masked[k], "delta": masked[k] - base[k]} for k in COMPARED]
    problems = [f"{k}: base {base[k]!r} but masked {masked[k]!r}; pack the same rows the same way"
                for k in SAME_INPUT if base[k] != masked[k]]
    problems += _drop_problems(base, masked)
    if masked["trainable_tokens"] > base["trainable_tokens"]:
        problems.append(f"trainable_tokens: masked {masked['trainable_tokens']} exceeds base "
                        f"{base['trainable_tokens']}; masking can only remove loss")
    return {"table": table, "accounted": not problems, "problems": problems}


def pack_into_store(store, name: str, lines, tokenizer, lm) -> tuple[str, dict]:
    """Pack `lines` with `lm`'s pack length, shards and seed into the store folder `name`: (digest, report)."""
    frames, report = pack_rows(lines, tokenizer, pack_length=lm.pack_length, shards=lm.shards, seed=lm.pack_seed)

    def fill(folder) -> None:
        for i, frame in enumerate(frames):
            frame.write_parquet(folder / f"shard-{i:05d}-of-{len(frames):05d}.parquet", statistics=False)

    return store.put_dir(name, fill), report


def rows_accounted(report: dict) -> list[str]:
    dropped = report["rows_no_trainable"] + report["rows_over_limit"]
    return ([f"{report['rows_in']} rows in, but {report['rows_packed']} packed + {dropped} dropped"]
            * (report["rows_in"] != report["rows_packed"] + dropped)
            + [f"{report['span_anomalies']} span anomalies"] * bool(report["span_anomalies"]))
