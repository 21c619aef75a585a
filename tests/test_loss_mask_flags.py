"""A loss-mask build from an external flags file (`apsft loss-mask add NAME PATH --flags FILE`): exactly
its turns masked, its shape checked at registration and its digest at build, and each flag the dataset
cannot hold (no such row, not an assistant turn, another content digest) stopping the build by file,
line and field. The rows are tests/test_loss_mask_formats.py's (the shipped example files)."""

import hashlib
import io
import json

import pytest

from apsft_dagster.core.loss_mask.datasets import register
from apsft_dagster.core.loss_mask.flags_file import ExternalFlags
from apsft_dagster.core.loss_mask.parallel import build_file
from apsft_dagster.core.loss_mask.rules import LossMaskError
from apsft_dagster.core.store import Store
from test_loss_mask_formats import CHAT, CHAT_EXPECTED, EXAMPLES, _run, _sha, _write


def _flags(tmp_path, lines):
    path = tmp_path / "classifier_flags.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_build_from_a_flags_file_masks_exactly_its_turns(tmp_path):
    data, flags = EXAMPLES / "openai_chat.jsonl", EXAMPLES / "classifier_flags.jsonl"
    assert [json.loads(line) for line in open(flags)] == [  # turns the rules keep (a1's answer, the greeting), one more
        {"row_id": "a1", "message_index": 4, "reasons": ["classifier:hedging"],
         "content_sha256": _sha("It is 3 degrees.")},
        {"row_id": "line-0000003", "message_index": 1, "reasons": ["classifier:hedging", "classifier:tone"],
         "content_sha256": _sha("Hello there")},  # the digest of the joined content parts
        {"row_id": "a2", "message_index": 3, "reasons": ["stall"]}]
    record = register(Store(tmp_path / "store"), "v1", data, flags=flags)
    assert record["flags"] == {"path": str(flags), "sha256": hashlib.sha256(flags.read_bytes()).hexdigest()}
    external = ExternalFlags(flags, record["flags"]["sha256"])
    assert external.counts() == {"masked_turns": 3, "reasons": {"classifier:hedging": 2, "classifier:tone": 1,
                                                                "stall": 1}}
    counted, report, checked, masks = _run(tmp_path, record, flags=external)
    assert counted == CHAT_EXPECTED  # the census still measures the rules
    assert masks == {"a1": [4], "line-0000003": [1], "a2": [3]} and report["reasons"] == external.counts()["reasons"]
    assert checked["masked_turns"] == 3 and checked["rows_masked_in_place"] == 3
    out, flag_lines = io.BytesIO(), io.BytesIO()  # in ranges: flagged rows joined before the every-flag-used check
    build_file(data, out, flag_lines, expected_reasons=external.counts()["reasons"], fmt="openai", flags=external,
               workers=2)
    assert out.getvalue() == (tmp_path / "masked.jsonl").read_bytes()
    assert flag_lines.getvalue() == (tmp_path / "flags.jsonl").read_bytes()


@pytest.mark.parametrize("flag, line_field", [
    ({"row_id": "zz", "message_index": 1, "reasons": ["x"]}, "line 2: field 'row_id'"),  # no such row
    ({"row_id": "a1", "message_index": 3, "reasons": ["x"]}, "line 2: field 'message_index'"),  # a tool turn
    ({"row_id": "a1", "message_index": 9, "reasons": ["x"]}, "line 2: field 'message_index'"),  # past the row
    ({"row_id": "a1", "message_index": 2, "reasons": ["x"], "content_sha256": "0" * 64},
     "line 2: field 'content_sha256'"),  # another turn's digest
])
def test_a_flag_the_dataset_cannot_hold_stops_the_build_by_file_line_and_field(tmp_path, flag, line_field):
    data = _write(tmp_path / "chat.jsonl", CHAT)
    flags = _flags(tmp_path, [{"row_id": "a2", "message_index": 1, "reasons": ["x"]}, flag])
    external = ExternalFlags(flags)
    with pytest.raises(LossMaskError, match=f"flags file {flags} {line_field}"):
        build_file(data, io.BytesIO(), io.BytesIO(), expected_reasons=external.counts()["reasons"], fmt="openai",
                   flags=external)


def test_a_flags_file_is_checked_at_registration_and_its_digest_at_build(tmp_path):
    data, store = _write(tmp_path / "chat.jsonl", CHAT), Store(tmp_path / "store")
    bad = _flags(tmp_path, [{"row_id": "a1", "message_index": "4", "reasons": ["x"]}])
    with pytest.raises(LossMaskError, match=f"flags file {bad} line 1: field 'message_index'"):
        register(store, "v1", data, flags=bad)
    assert not store.exists("loss_mask/v1/source.json")  # nothing written
    flags = _flags(tmp_path, [{"row_id": "a1", "message_index": 4, "reasons": ["x"]}])
    record = register(store, "v1", data, flags=flags)
    flags.write_text(flags.read_text().replace('"x"', '"y"'))
    with pytest.raises(LossMaskError, match="hashes differently from its registration"):
        ExternalFlags(record["flags"]["path"], record["flags"]["sha256"])


def test_build_json_records_the_rule_settings_and_the_code_digest():
    from apsft_dagster.core.config import load_config
    from apsft_dagster.core.embedded.cache import code_digest
    from apsft_dagster.core.loss_mask.build import RULE_CODE, rules_record
    from apsft_dagster.core.loss_mask.rules import DEFAULT_PROSE_COMMANDS

    settings = load_config("smoke").loss_mask.model_copy(update={"known_broken_families": ["net", "build"]})
    record = rules_record(settings, CHAT_EXPECTED)
    assert record["known_broken_families"] == ["build", "net"] and record["prose_commands_default"] is True
    assert record["prose_commands"] == sorted(DEFAULT_PROSE_COMMANDS)
    assert (record["ran"], record["skipped"]) == (CHAT_EXPECTED["ran"], CHAT_EXPECTED["skipped"])
    assert "core/loss_mask/formats" in RULE_CODE and record["code_digest"] == code_digest(RULE_CODE)
    assert code_digest(RULE_CODE) != code_digest(tuple(p for p in RULE_CODE if p != "core/loss_mask/formats"))
