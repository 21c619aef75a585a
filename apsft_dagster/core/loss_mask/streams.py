"""The build's byte streams, hashed off its thread: a file read in 4 MiB blocks whose lines are
yielded while the blocks are hashed, and a sink that writes and hashes in 1 MiB blocks.

SHA-256 runs on a thread per stream: hashlib releases the GIL while it hashes a large buffer, so
the build's own thread only hands blocks over (a bounded queue, so memory stays flat however far
a hash falls behind). Whole blocks keep the hand-overs rare: a thread that had to win the GIL
back for every line would wait most of its time.
"""

from __future__ import annotations

import hashlib
import io
import queue
import threading
from collections.abc import Iterator
from typing import BinaryIO

READ_BLOCK = 1 << 22
WRITE_BLOCK = 1 << 20


class Hasher:
    """SHA-256 of the blocks `put` in order, computed on a thread; `hexdigest()` waits for it."""

    def __init__(self):
        self._hash = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
        self._thread: threading.Thread | None = threading.Thread(target=self._run, name="lm-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (block := self._queue.get()) is not None:
            self._hash.update(block)

    def put(self, block: bytes) -> None:
        self._queue.put(block)

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def hexdigest(self) -> str:
        self.close()
        return self._hash.hexdigest()


def hashed_lines(handle: BinaryIO, hasher: Hasher | None) -> Iterator[bytes]:
    """The lines of a binary file (each with its newline; the last may lack one), read in blocks
    that are handed to `hasher` whole, so the digest is of exactly the bytes the lines came from."""
    tail = b""
    while block := handle.read(READ_BLOCK):
        if hasher is not None:
            hasher.put(block)
        start = 0
        if tail:  # the line the previous block ended inside
            start = block.find(b"\n") + 1
            if not start:
                tail += block
                continue
            yield tail + block[:start]
            tail = b""
        lines = io.BytesIO(block)  # shares the block's memory; its line iterator splits at b"\n" only
        lines.seek(start)
        for line in lines:
            if line.endswith(b"\n"):
                yield line
            else:
                tail = line
    if tail:
        yield tail


class BlockSink:
    """Writes to a binary file (or nowhere) and hashes, both in blocks of about 1 MiB."""

    def __init__(self, sink: BinaryIO | None = None, hashing: bool = True):
        self.sink, self.bytes = sink, 0
        self.hasher = Hasher() if hashing else None
        self._pending: list[bytes] = []
        self._size = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)
        self._pending.append(data)
        self._size += len(data)
        if self._size >= WRITE_BLOCK:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            block = b"".join(self._pending)
            self._pending, self._size = [], 0
            if self.sink is not None:
                self.sink.write(block)
            if self.hasher is not None:
                self.hasher.put(block)

    def hexdigest(self) -> str | None:
        self.flush()
        return None if self.hasher is None else self.hasher.hexdigest()

    def close(self) -> None:
        if self.hasher is not None:
            self.hasher.close()
