"""The build's byte streams, hashed off its thread: a file read in 4 MiB blocks whose lines are
yielded while the blocks are hashed, and a sink that writes and hashes in 1 MiB blocks.

SHA-256 runs on one thread shared by a build's streams: hashlib releases the GIL while it hashes
a large buffer, so the build's own thread only hands blocks over (a bounded queue, so memory stays
flat however far the hashing falls behind). Whole blocks keep the hand-overs rare: a thread that
had to win the GIL back for every line would wait most of its time. One thread, not one per
stream: with two cores, a third runnable thread only takes time from the build's.
"""

from __future__ import annotations

import hashlib
import io
import queue
import threading
from collections.abc import Iterator
from typing import BinaryIO

READ_BLOCK = 1 << 22
# The read buffer for a file iterated by lines: the default 8 KiB makes a 46 KB line (the seed's
# mean) take several reads and joins; 1 MiB parses the seed-shaped file about 15% faster.
LINE_BUFFER = 1 << 20
WRITE_BLOCK = 1 << 20


class HashThread:
    """One thread that applies queued (hash, block) updates in order; the streams of one build
    share it, so hashing never takes more than the one core the build's own thread leaves free."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue(maxsize=8)
        self._thread: threading.Thread | None = threading.Thread(target=self._run, name="lm-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            digest, block = item
            if block is None:
                digest.set()  # a drain marker: every update queued before it is done
            else:
                digest.update(block)

    def put(self, digest, block: bytes) -> None:
        self._queue.put((digest, block))

    def drain(self) -> None:
        if self._thread is not None:
            done = threading.Event()
            self._queue.put((done, None))
            done.wait()

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None


class Hasher:
    """SHA-256 of the blocks `put` in order, computed on a HashThread (its own unless one is
    given to share); `hexdigest()` waits for the blocks queued so far."""

    def __init__(self, thread: HashThread | None = None):
        self._hash = hashlib.sha256()
        self._own = thread is None
        self._thread = HashThread() if thread is None else thread

    def put(self, block: bytes) -> None:
        self._thread.put(self._hash, block)

    def close(self) -> None:
        if self._own:
            self._thread.close()

    def hexdigest(self) -> str:
        """The digest of every block put so far (a thread of its own is closed: put nothing more)."""
        if self._own:
            self.close()
        else:
            self._thread.drain()
        return self._hash.hexdigest()


class _HashingReader(io.RawIOBase):
    """A binary file whose bytes are handed to a hasher as they are read (whole reads, in order)."""

    def __init__(self, handle: BinaryIO, hasher: Hasher | None):
        self.handle, self.hasher = handle, hasher

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.handle.read(len(buffer))
        buffer[:len(data)] = data
        if data and self.hasher is not None:
            self.hasher.put(data)
        return len(data)


def hashed_lines(handle: BinaryIO, hasher: Hasher | None) -> Iterator[bytes]:
    """The lines of a binary file (each with its newline; the last may lack one), read in 4 MiB
    blocks that are handed to `hasher` whole, so the digest is of exactly the bytes the lines came
    from; the lines are split by io.BufferedReader's own (C) line iterator."""
    return io.BufferedReader(_HashingReader(handle, hasher), buffer_size=READ_BLOCK)


class BlockSink:
    """Writes to a binary file (or nowhere) and hashes, both in blocks of about 1 MiB."""

    def __init__(self, sink: BinaryIO | None = None, hashing: bool = True, thread: HashThread | None = None):
        self.sink, self.bytes = sink, 0
        self.hasher = Hasher(thread) if hashing else None
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
