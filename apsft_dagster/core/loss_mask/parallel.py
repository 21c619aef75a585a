"""Census and build over one file in worker processes: the file is cut at line starts into one
byte range per worker, each worker counts (census) or masks (build) its range alone, and the
parent merges the counts; the build's part files are concatenated in range order, so the output
and flags are byte-identical to one sequential pass (tested). `workers=1` is that pass itself.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import BinaryIO

from apsft_dagster.core.loss_mask.build import build, check_reasons
from apsft_dagster.core.loss_mask.census import census, merge_census
from apsft_dagster.core.loss_mask.streams import LINE_BUFFER
from apsft_dagster.core.store import sha256_file

CHUNK = 1 << 22


def line_ranges(path: Path, parts: int) -> list[tuple[int, int, int]]:
    """(start, stop, number of the range's first line): `parts` byte ranges cut at line starts."""
    size = path.stat().st_size
    cuts = [0]
    with open(path, "rb") as handle:
        for k in range(1, parts):
            handle.seek(max(size * k // parts, cuts[-1]))
            handle.readline()  # on to the next line start
            cuts.append(min(max(handle.tell(), cuts[-1]), size))
    cuts.append(size)
    ranges, line = [], 1
    with open(path, "rb") as handle:
        for start, stop in zip(cuts, cuts[1:]):
            if stop > start:
                ranges.append((start, stop, line))
                line += _newlines(handle, start, stop)
    return ranges


def _newlines(handle: BinaryIO, start: int, stop: int) -> int:
    handle.seek(start)
    count, left = 0, stop - start
    while left > 0:
        chunk = handle.read(min(CHUNK, left))
        count += chunk.count(b"\n")
        left -= len(chunk)
    return count


def lines_in(path: Path, start: int, stop: int) -> Iterator[bytes]:
    """The lines that start in [start, stop); ranges are cut at line starts, so they end at stop."""
    left = stop - start
    with open(path, "rb", buffering=LINE_BUFFER) as handle:
        handle.seek(start)
        for line in handle:  # the file's own line iterator: no tell() per line
            if left <= 0:
                return
            yield line
            left -= len(line)


def _pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def _census_range(path: str, start: int, stop: int, first_line: int, rules: dict) -> dict:
    return census(lines_in(Path(path), start, stop), first_line=first_line, **rules)


def census_file(path: str | Path, *, workers: int = 1, **rules) -> dict:
    """census() of the whole file, its ranges counted in `workers` processes."""
    path = Path(path)
    rules.setdefault("source_name", str(path))
    if workers <= 1:
        with open(path, "rb", buffering=LINE_BUFFER) as handle:
            return census(handle, **rules)
    ranges = line_ranges(path, workers)
    with _pool(workers) as pool:
        parts = list(pool.map(_census_range, *zip(*[(str(path), a, b, n, rules) for a, b, n in ranges])))
    return merge_census(parts)


def _build_range(path: str, start: int, stop: int, first_line: int, folder: str, k: int, rules: dict) -> dict:
    with open(Path(folder) / f"{k}.out", "wb") as out, open(Path(folder) / f"{k}.flags", "wb") as flags:
        return build(lines_in(Path(path), start, stop), out, flags, expected_reasons=None, digests=False,
                     first_line=first_line, **rules)


PARTS_PER_WORKER = 4  # the build's ranges per worker: the parent joins a finished part while later ones run


def build_file(path: str | Path, out: BinaryIO, flags_out: BinaryIO, *, expected_reasons: dict[str, int],
               workers: int = 1, **rules) -> dict:
    """build() of the whole file, its ranges masked in `workers` processes and joined in order.
    The file is cut into more ranges than workers, so the parent's own work (the base's SHA-256,
    then copying and hashing each finished part) overlaps the masking of the parts after it.
    `rules` may hold `fmt` and `flags` (an external flags file: its counts are then the expected ones)."""
    path = Path(path)
    rules.setdefault("source_name", str(path))
    if workers <= 1:
        with open(path, "rb") as handle:
            return build(handle, out, flags_out, expected_reasons=expected_reasons, **rules)
    ranges = line_ranges(path, workers * PARTS_PER_WORKER)
    output, flags = _Joined(out), _Joined(flags_out)
    with tempfile.TemporaryDirectory(prefix="lm-build-") as folder, _pool(workers) as pool:
        running = [pool.submit(_build_range, str(path), a, b, n, folder, k, rules)
                   for k, (a, b, n) in enumerate(ranges)]
        base_sha256 = sha256_file(path)  # while the workers mask: the parent is otherwise idle
        parts = []
        for k, job in enumerate(running):  # in order, each as soon as it is done
            parts.append(job.result())
            output.add(Path(folder) / f"{k}.out")
            flags.add(Path(folder) / f"{k}.flags")
    reasons: dict[str, int] = {}
    for part in parts:
        for reason, n in part["reasons"].items():
            reasons[reason] = reasons.get(reason, 0) + n
    reasons = dict(sorted(reasons.items()))
    if rules.get("flags") is not None:
        rules["flags"].check_all_used(set().union(*(p["flagged_rows"] for p in parts)))
    check_reasons(reasons, expected_reasons, rules.get("flags"))
    return {"rows": sum(p["rows"] for p in parts), "masked_turns": sum(p["masked_turns"] for p in parts),
            "reasons": reasons, "base_sha256": base_sha256, "output_sha256": output.digest.hexdigest(),
            "flags_sha256": flags.digest.hexdigest(), "output_bytes": output.size}


class _Joined:
    """Part files appended to a sink in order, hashed as they pass; each part deleted once copied."""

    def __init__(self, sink: BinaryIO):
        self.sink, self.digest, self.size = sink, hashlib.sha256(), 0

    def add(self, part: Path) -> None:
        with open(part, "rb") as handle:
            while chunk := handle.read(CHUNK):
                self.digest.update(chunk)
                self.size += len(chunk)
                self.sink.write(chunk)
        part.unlink()
