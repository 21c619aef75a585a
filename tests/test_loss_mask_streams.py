"""The build's hashed streams against Python's own line iterator and hashlib over the same bytes."""

import hashlib
import io
import random

import pytest

from apsft_dagster.core.loss_mask import streams
from apsft_dagster.core.loss_mask.streams import BlockSink, Hasher, hashed_lines


@pytest.mark.parametrize("block", [1, 2, 3, 7, 64, 1 << 22])
def test_hashed_lines_are_the_file_lines_and_the_digest_is_the_file_digest(monkeypatch, block):
    monkeypatch.setattr(streams, "READ_BLOCK", block)
    rng = random.Random(block)
    cases = [b"", b"\n", b"a", b"a\n", b"\n\n\nx", b"a\r\nb\rc\x0bd\n", b"{\"k\": 1}\n" * 5 + b"tail"]
    cases += [bytes(rng.choice(b"ab\n\r ") for _ in range(rng.randint(0, 300))) for _ in range(40)]
    for data in cases:
        hasher = Hasher()
        assert list(hashed_lines(io.BytesIO(data), hasher)) == list(io.BytesIO(data)), data
        assert hasher.hexdigest() == hashlib.sha256(data).hexdigest()


def test_the_block_sink_writes_and_hashes_every_byte_in_order(monkeypatch):
    monkeypatch.setattr(streams, "WRITE_BLOCK", 5)
    out = io.BytesIO()
    parts = [b"abc", b"", b"defgh", b"i" * 12, b"j"]
    sink = BlockSink(out)
    for part in parts:
        sink.write(part)
    assert sink.hexdigest() == hashlib.sha256(b"".join(parts)).hexdigest()
    assert out.getvalue() == b"".join(parts) and sink.bytes == len(b"".join(parts))
    plain = BlockSink(io.BytesIO(), hashing=False)
    plain.write(b"x")
    assert plain.hexdigest() is None
