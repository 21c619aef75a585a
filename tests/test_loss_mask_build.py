"""Build and verify: exactly the flagged turns masked, untouched rows byte-for-byte, mutations caught."""

import io
import json

import pytest

from apsft_dagster.core.loss_mask.build import build
from apsft_dagster.core.loss_mask.census import census
from apsft_dagster.core.loss_mask.dataset import planted_rows
from apsft_dagster.core.loss_mask.verify import VerifyError, verify


@pytest.fixture
def built(tmp_path):
    pairs = list(planted_rows(400, seed=9))
    base = tmp_path / "base.jsonl"
    base.write_bytes(b"".join(json.dumps(row).encode() + b"\n" for row, _ in pairs))
    counted = census(base.read_bytes().splitlines(keepends=True))["total"]["reasons"]
    out, flags = io.BytesIO(), io.BytesIO()
    report = build(base.read_bytes().splitlines(keepends=True), out, flags, expected_reasons=counted)
    (tmp_path / "out.jsonl").write_bytes(out.getvalue())
    (tmp_path / "flags.jsonl").write_bytes(flags.getvalue())
    return pairs, base, tmp_path / "out.jsonl", tmp_path / "flags.jsonl", report


def test_build_masks_the_planted_turns_only_and_verifies(built):
    pairs, base, out, flags, report = built
    outputs = out.read_bytes().splitlines(keepends=True)
    inputs = base.read_bytes().splitlines(keepends=True)
    assert len(outputs) == len(inputs) == report["rows"] == 400
    for (row, truth), line_in, line_out in zip(pairs, inputs, outputs):
        if not truth.flags:
            assert line_out == line_in  # an untouched row keeps its original bytes
        masked = {i for i, m in enumerate(json.loads(line_out)["messages"]) if m.get("step_loss_mask") == 0}
        assert masked == set(truth.flags), row["row_id"]
    assert report["masked_turns"] == sum(len(t.flags) for _, t in pairs)
    touched = sum(1 for _, t in pairs if t.flags)
    assert verify(base, out, flags) == {"rows": 400, "masked_turns": report["masked_turns"],
                                        "rows_byte_identical": 400 - touched, "rows_masked_in_place": touched}


def test_build_refuses_counts_that_differ_from_the_census(built):
    _, base, *_ = built
    with pytest.raises(Exception, match="the census counted"):
        build(base.read_bytes().splitlines(keepends=True), io.BytesIO(), io.BytesIO(), expected_reasons={"stall": 1})


def _rewrite(path, edit):
    rows = [json.loads(line) for line in path.read_bytes().splitlines()]
    rows = edit(rows)
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows))


def test_verify_catches_a_row_whose_bytes_changed_though_it_parses_the_same(built):
    pairs, base, out, flags, _ = built
    original = out.read_bytes().splitlines(keepends=True)
    for touched in (False, True):  # an untouched row re-spaced; a masked row with a \u escape for one letter
        k, (row, _) = next((k, p) for k, p in enumerate(pairs) if bool(p[1].flags) == touched)
        lines = list(original)
        lines[k] = (json.dumps(json.loads(lines[k]), separators=(",", ":")).encode() + b"\n" if not touched
                    else lines[k].replace(b'"role"', b'"r\\u006fle"', 1))
        assert json.loads(lines[k]) == json.loads(original[k])
        out.write_bytes(b"".join(lines))
        with pytest.raises(VerifyError, match=f"row '{row['row_id']}': its bytes differ from the input line"):
            verify(base, out, flags)


def test_verify_catches_a_changed_field_a_dropped_row_and_a_mask_on_a_user_turn(built):
    pairs, base, out, flags, _ = built
    target = next(row["row_id"] for row, t in pairs if not t.flags)
    original = out.read_bytes()

    def change(rows):
        next(r for r in rows if r["row_id"] == target)["source"] = "tampered"
        return rows

    for edit, message in ((change, f"row '{target}': differs from its input"),
                          (lambda rows: rows[:17] + rows[18:], "row '.*': the output has"),
                          (lambda rows: [*rows[:-1], {**rows[-1], "messages": [
                              {**m, "step_loss_mask": 0} if m["role"] == "user" else m
                              for m in rows[-1]["messages"]]}], "is masked without a flag")):
        out.write_bytes(original)
        _rewrite(out, edit)
        with pytest.raises(VerifyError, match=message):
            verify(base, out, flags)


@pytest.mark.parametrize("content", ["plain", "", None, 'quote " and \\ slash', "tab\tnew\nline\x01",
                                     "ünïcødé ✓ 🚀", "\u2028 line separator"])
def test_flag_lines_are_exactly_what_json_dumps_writes(content):
    from apsft_dagster.core.loss_mask.build import flag_line

    reasons = ["stall", "terminus-json"]
    expected = json.dumps({"row_id": f"r-{content}", "message_index": 3, "reasons": reasons,
                           "content_sha256": __import__("hashlib").sha256(
                               json.dumps(content, ensure_ascii=False).encode()).hexdigest()},
                          sort_keys=True, ensure_ascii=False).encode() + b"\n"
    assert flag_line(f"r-{content}", 3, reasons, content) == expected


@pytest.mark.parametrize("key", ['"step_loss_mask"', '"step\\u005floss_mask"', '"\\u0073tep_loss_mask"'])
def test_build_refuses_a_base_that_already_carries_the_mask_key_however_it_is_spelt(key):
    row, _ = next(iter(planted_rows(1, seed=3)))
    line = json.dumps(row).encode()
    assert line.count(b'"content": ') >= 1
    line = line.replace(b'"content": ', key.encode() + b': 1, "content": ', 1) + b"\n"
    with pytest.raises(Exception, match="already carries step_loss_mask"):
        build([line], io.BytesIO(), io.BytesIO(), expected_reasons=None)
