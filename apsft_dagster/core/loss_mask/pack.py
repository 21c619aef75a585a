"""Packing: every row rendered with its loss mask (spans.py), packed into fixed-length training
sequences as a stream, and the comparison with the unmasked base packed the same way (pack_compare.py).

Packing rule (pack_place.py): rows are taken in windows of `window` input rows, each window in a
permutation seeded by (pack_seed, window index), the same for a masked build and its base (they hold the
same rows in the same order), so the two differ only by the rows one of them drops; each row goes into
the first open pack with room, at most MAX_OPEN_PACKS open; packs are numbered as they close and written
then (pack_write.py). Memory holds one window of encoded rows and the open packs, whatever the file's size.
Rows over `pack_length` are dropped first (length does not depend on masking), then rows with nothing to
train; both are spilled to `dropped.jsonl` in input order.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import polars as pl

from apsft_dagster.core.loss_mask.pack_encode import NO_TRAINABLE, OVER_LIMIT, encoded_rows, parse_row
from apsft_dagster.core.loss_mask.pack_place import Placer, window_order
from apsft_dagster.core.loss_mask.pack_write import DROPPED, DropSpill, ShardWriters, read_dropped, shard_name
from apsft_dagster.core.loss_mask.rules import LossMaskError
from apsft_dagster.core.loss_mask.spans import chat_template_for

__all__ = ("NO_TRAINABLE", "OVER_LIMIT", "pack_into_store", "pack_rows", "pack_to_folder", "parse_row",
           "rows_accounted")


def _windows(rows: Iterator, window: int) -> Iterator[list]:
    batch = []
    for row in rows:
        batch.append(row)
        if len(batch) == window:
            yield batch
            batch = []
    if batch:
        yield batch


def pack_to_folder(lines: Iterable[bytes], tokenizer, folder: Path, *, pack_length: int, shards: int, seed: int,
                   window: int, chat_template: str | None = None, fmt: str = "native", source: str = "input",
                   workers: int = 1) -> dict:
    """Pack `lines` into `folder` (Parquet shards and dropped.jsonl) and return the pack report. The token
    figures count what the packs hold; dropped rows are counted, sampled and spilled in input order."""
    if pack_length < 1 or shards < 1 or window < 1:
        raise LossMaskError(f"pack_length ({pack_length}), shards ({shards}) and pack_window ({window}) must be "
                            "positive; fix the config")
    if tokenizer.pad_token_id is None:
        raise LossMaskError("the tokenizer has no pad token; packs are padded with it, so set one")
    template = chat_template or chat_template_for(tokenizer)  # one given (the dataset's own) comes first
    writers, spill = ShardWriters(folder, shards, pack_length, tokenizer.pad_token_id), DropSpill(folder)
    placer, tally = Placer(pack_length), dict.fromkeys(
        ("rows_in", "rows_packed", "tokens", "trainable_tokens", "masked_assistant_tokens", "rows_no_trainable",
         "rows_over_limit"), 0)
    try:
        rows = encoded_rows(lines, tokenizer, template, pack_length, fmt, source, workers)
        for number, batch in enumerate(_windows(rows, window)):
            for at, row in enumerate(batch):  # input order: the spill is in input order
                _count(row, number * window + at, tally, spill)
            for at in window_order(seed, number, len(batch)):
                if batch[at][0] is None:
                    for members in placer.add(batch[at][1:4], len(batch[at][2])):
                        writers.add(members)
            batch = None  # let this window go before the next one is encoded (one window held, not two)
        for members in placer.finish():
            writers.add(members)
    finally:
        writers.close()
        spill.close()
    packs, tokens = writers.packs, tally["tokens"]
    return {**{k: tally[k] for k in ("rows_in", "rows_packed")}, "packs": packs, "tokens": tokens,
            "pad_tokens": packs * pack_length - tokens, "efficiency": tokens / (packs * pack_length or 1),
            "trainable_tokens": tally["trainable_tokens"], "masked_assistant_tokens": tally["masked_assistant_tokens"],
            "loss_coverage": tally["trainable_tokens"] / tokens if tokens else 0.0,
            "rows_no_trainable": tally["rows_no_trainable"], "rows_over_limit": tally["rows_over_limit"],
            "dropped_file": DROPPED, "dropped_sample": spill.sample, "span_anomalies": 0,  # any anomaly raised
            "pack_length": pack_length, "shards": shards, "seed": seed, "window": window, "format": fmt,
            "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest()}


def _count(row: tuple, position: int, tally: dict, spill: DropSpill) -> None:
    """Tally one row; a dropped row (reason, row_id, tokens) is spilled."""
    reason, rid, ids = row[0], row[1], row[2]
    tally["rows_in"] += 1
    if reason:
        tally[f"rows_{reason}"] += 1
        spill.add({"row": position, "row_id": rid, "reason": reason, "tokens": ids})
        return
    tally["rows_packed"] += 1
    tally["tokens"] += len(ids)
    tally["trainable_tokens"] += row[4]
    tally["masked_assistant_tokens"] += row[5]


def pack_rows(lines: Iterable[bytes], tokenizer, *, pack_length: int, shards: int, seed: int, window: int = 1024,
              chat_template: str | None = None, fmt: str = "native",
              workers: int = 1) -> tuple[list[pl.DataFrame], dict]:
    """pack_to_folder into a temporary folder, read back: (one frame per shard, the report with `dropped`,
    the whole dropped list). For small inputs (tests, tools)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = pack_to_folder(lines, tokenizer, Path(tmp), pack_length=pack_length, shards=shards, seed=seed,
                                window=window, chat_template=chat_template, fmt=fmt, workers=workers)
        frames = [pl.read_parquet(Path(tmp) / shard_name(s, shards)) for s in range(shards)]
        return frames, {**report, "dropped": list(read_dropped(Path(tmp)))}


def pack_into_store(store, name: str, lines, tokenizer, lm, *, chat_template: str | None = None,
                    fmt: str = "native", source: str = "input") -> tuple[str, dict]:
    """Pack `lines` with `lm`'s pack length, shards, seed, window and workers into the store folder `name`:
    (digest, report)."""
    reports = []

    def fill(folder) -> None:
        reports.append(pack_to_folder(lines, tokenizer, folder, pack_length=lm.pack_length, shards=lm.shards,
                                      seed=lm.pack_seed, window=lm.pack_window, chat_template=chat_template,
                                      fmt=fmt, source=source, workers=lm.workers))

    return store.put_dir(name, fill), reports[0]


def rows_accounted(report: dict) -> list[str]:
    dropped = report["rows_no_trainable"] + report["rows_over_limit"]
    return ([f"{report['rows_in']} rows in, but {report['rows_packed']} packed + {dropped} dropped"]
            * (report["rows_in"] != report["rows_packed"] + dropped)
            + [f"{report['span_anomalies']} span anomalies"] * bool(report["span_anomalies"]))
