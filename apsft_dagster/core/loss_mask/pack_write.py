"""Writing packs as they close: one streaming Parquet writer per shard, and the dropped rows' spill.

Pack p goes to shard p % shards (pack ids ascend within a shard: they are numbered as they close);
each shard is written in row groups of about ROW_GROUP_TOKENS tokens with fixed settings (zstd, no
statistics), so a rerun writes the same bytes. A pack is its members' tokens end to end, then pad
(loss 0, positions from 0 again). Dropped rows go to `dropped.jsonl` in input order, one
{"row": input position, "row_id", "reason", "tokens"} a line, which the comparison reads as a stream.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROW_GROUP_TOKENS = 1 << 21
DROPPED = "dropped.jsonl"
SCHEMA = pa.schema([("pack_id", pa.int64()), ("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.uint8())),
                    ("position_ids", pa.list_(pa.int32())), ("row_ids", pa.list_(pa.string())),
                    ("seq_lens", pa.list_(pa.int32()))])


def shard_name(shard: int, shards: int) -> str:
    return f"shard-{shard:05d}-of-{shards:05d}.parquet"


class ShardWriters:
    """`add(members)` writes the next closed pack (members: (row_id, ids, mask) tuples)."""

    def __init__(self, folder: Path, shards: int, pack_length: int, pad_id: int):
        self.pack_length, self.pad_id, self.packs = pack_length, pad_id, 0
        self.writers = [pq.ParquetWriter(folder / shard_name(s, shards), SCHEMA, compression="zstd",
                                         write_statistics=False) for s in range(shards)]
        self.buffers: list[list] = [[] for _ in range(shards)]
        self.group = max(1, ROW_GROUP_TOKENS // pack_length)

    def add(self, members: list) -> None:
        lens = [len(m[1]) for m in members]
        pad = self.pack_length - sum(lens)
        pack = (self.packs, np.concatenate([m[1] for m in members] + [np.full(pad, self.pad_id, np.int32)]),
                np.concatenate([m[2] for m in members] + [np.zeros(pad, np.uint8)]),
                np.concatenate([np.arange(n, dtype=np.int32) for n in [*lens, pad]]), [m[0] for m in members], lens)
        shard = self.packs % len(self.writers)
        self.packs += 1
        self.buffers[shard].append(pack)
        if len(self.buffers[shard]) >= self.group:
            self._flush(shard)

    def _flush(self, shard: int) -> None:
        packs, self.buffers[shard] = self.buffers[shard], []
        if not packs:
            return
        offsets = pa.array(np.arange(len(packs) + 1, dtype=np.int32) * self.pack_length)

        def tokens(k: int, kind) -> pa.Array:
            return pa.ListArray.from_arrays(offsets, pa.array(np.concatenate([p[k] for p in packs]), kind))

        columns = [pa.array([p[0] for p in packs], pa.int64()), tokens(1, pa.int32()), tokens(2, pa.uint8()),
                   tokens(3, pa.int32()), pa.array([p[4] for p in packs], SCHEMA.field("row_ids").type),
                   pa.array([p[5] for p in packs], SCHEMA.field("seq_lens").type)]
        self.writers[shard].write_table(pa.Table.from_arrays(columns, schema=SCHEMA), row_group_size=len(packs))

    def close(self) -> None:
        for shard, writer in enumerate(self.writers):
            self._flush(shard)
            writer.close()


class DropSpill:
    """The dropped rows, written as they are found (input order), with a short sample kept for the report."""

    SAMPLE = 20

    def __init__(self, folder: Path):
        self.handle = open(folder / DROPPED, "wb")
        self.sample: list[dict] = []

    def add(self, record: dict) -> None:
        self.handle.write(json.dumps(record).encode() + b"\n")
        if len(self.sample) < self.SAMPLE:
            self.sample.append(record)

    def close(self) -> None:
        self.handle.close()


def read_dropped(folder: Path):
    """The dropped rows of a packs folder, in input order, streamed."""
    with open(Path(folder) / DROPPED, "rb") as handle:
        for line in handle:
            yield json.loads(line)
