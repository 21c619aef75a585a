"""Hugging Face chat datasets staged to JSON lines at registration: a `datasets.save_to_disk` folder
(its Arrow files, read with pyarrow: no `datasets` import) or a Parquet file, with a `messages` (or
`conversations`) column. The build splices masks into line bytes, so a columnar source is written
once as JSON lines in the store and registered as those; the original and its SHA-256 are
recorded beside. Arrow structs cannot tell an absent key from a null one (every row of a struct
column has every field), so keys whose value is null are dropped from every object on the way; an
`arguments` column kept as JSON text (the usual HF convention) keeps its exact spelling.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from apsft_dagster.core.loss_mask.rules import LossMaskError

BATCH = 1024


def _arrow_files(folder: Path) -> list[Path]:
    if (folder / "dataset_dict.json").exists():
        splits = json.loads((folder / "dataset_dict.json").read_text()).get("splits", [])
        raise LossMaskError(f"{folder} is a DatasetDict (splits {splits}); register one split's folder, e.g. "
                            f"{folder / (splits[0] if splits else 'train')}")
    state = folder / "state.json"
    if not state.exists():
        raise LossMaskError(f"{folder}: no state.json; give a folder written by datasets' save_to_disk, a Parquet "
                            "file or a JSON-lines file")
    files = [folder / f["filename"] for f in json.loads(state.read_text()).get("_data_files", [])]
    if not files or not all(f.is_file() for f in files):
        raise LossMaskError(f"{folder}: state.json lists no Arrow files present in the folder; save the dataset again")
    return files


def _batches(path: Path) -> Iterator:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if path.is_dir():
            for file in _arrow_files(path):
                with pa.memory_map(str(file)) as source:
                    yield from pa.ipc.open_stream(source)
        else:
            yield from pq.ParquetFile(path).iter_batches(batch_size=BATCH)
    except (pa.ArrowException, OSError) as exc:
        raise LossMaskError(f"{path}: not a readable Parquet file or Arrow dataset ({exc}); export it again") from None


def columns(path: Path) -> list[str]:
    """The dataset's column names (its schema; no rows are read for Parquet)."""
    import pyarrow.parquet as pq

    if path.is_dir():
        first = next(_batches(path), None)
        return [] if first is None else first.schema.names
    try:
        return pq.read_schema(path).names
    except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
        raise LossMaskError(f"{path}: not a readable Parquet file ({exc}); export it again") from None


def _no_nulls(value: object) -> object:
    if isinstance(value, dict):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls(v) for v in value]
    return value


def stage(path: Path, out: Path) -> int:
    """Write the dataset's rows as JSON lines at `out` (whole or not at all); the number of rows."""
    names = columns(path)
    if "messages" not in names and "conversations" not in names:
        raise LossMaskError(f"{path}: field 'messages' is not a column (columns: {names}); a chat dataset needs a "
                            "`messages` (or ShareGPT `conversations`) column")
    tmp, rows = out.with_name(f".{out.name}.tmp-{os.getpid()}"), 0
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            for batch in _batches(path):
                for row in batch.to_pylist():
                    handle.write(json.dumps(_no_nulls(row), ensure_ascii=False) + "\n")
                    rows += 1
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return rows
