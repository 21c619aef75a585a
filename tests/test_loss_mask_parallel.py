"""Census and build in worker processes equal one sequential pass, byte for byte."""

import io

import pytest

from apsft_dagster.core.loss_mask.build import build
from apsft_dagster.core.loss_mask.census import census
from apsft_dagster.core.loss_mask.dataset import dataset_lines
from apsft_dagster.core.loss_mask.parallel import build_file, census_file, line_ranges
from apsft_dagster.core.loss_mask.rules import LossMaskError


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("lm") / "rows.jsonl"
    path.write_bytes(b"".join(dataset_lines(600, seed=4)))
    return path


def test_ranges_cut_at_line_starts_and_cover_the_file_once(data):
    raw = data.read_bytes()
    for parts in (1, 2, 3, 7):
        ranges = line_ranges(data, parts)
        assert ranges[0][0] == 0 and ranges[-1][1] == len(raw)
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert all(start == 0 or raw[start - 1:start] == b"\n" for start, _, _ in ranges)
        assert [n for _, _, n in ranges] == [raw[:start].count(b"\n") + 1 for start, _, _ in ranges]


def test_workers_give_the_sequential_census_and_build_bytes(data):
    sequential = census(data.read_bytes().splitlines(keepends=True))
    assert census_file(data, workers=3) == sequential and census_file(data, workers=1) == sequential
    out, flags = io.BytesIO(), io.BytesIO()
    one = build(data.read_bytes().splitlines(keepends=True), out, flags,
                expected_reasons=sequential["total"]["reasons"])
    out3, flags3 = io.BytesIO(), io.BytesIO()
    three = build_file(data, out3, flags3, expected_reasons=sequential["total"]["reasons"], workers=3)
    assert out3.getvalue() == out.getvalue() and flags3.getvalue() == flags.getvalue() and three == one


def test_a_bad_line_is_named_by_its_number_in_the_whole_file(tmp_path, data):
    """(Each pool starts fresh interpreters: the tests keep their number small.)"""
    lines = data.read_bytes().splitlines(keepends=True)
    lines[450] = b"{oops\n"
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"".join(lines))
    with pytest.raises(LossMaskError, match=r"bad.jsonl line 451: not valid JSON"):
        census_file(bad, workers=3)


def test_workers_refuse_counts_that_differ_from_the_census(data):
    counted = census_file(data)["total"]["reasons"]
    with pytest.raises(LossMaskError, match="but the census counted"):
        build_file(data, io.BytesIO(), io.BytesIO(), expected_reasons={**counted, "stall": 0}, workers=2)
