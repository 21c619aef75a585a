"""Loss-mask curation on the chat formats teams have: OpenAI chat JSONL (object arguments,
reasoning_content, content parts, the legacy function role), ShareGPT (LLaMA-Factory), Parquet and
datasets folders staged at registration; rules that need a harness or verifier skipped and
counted; a build from an external flags file. Census, build and verify run on the core (no Dagster)."""

import hashlib
import io
import json
from pathlib import Path

import pytest

from apsft_dagster.core.loss_mask import flag_row
from apsft_dagster.core.loss_mask.build import MASK_KEY
from apsft_dagster.core.loss_mask.datasets import register
from apsft_dagster.core.loss_mask.formats import canonical_row, detect_format
from apsft_dagster.core.loss_mask.parallel import build_file, census_file
from apsft_dagster.core.loss_mask.rules import LossMaskError
from apsft_dagster.core.loss_mask.verify import verify
from apsft_dagster.core.store import Store

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "loss_mask"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}]


def _call_row(arguments):
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    return {"row_id": "r", "harness": "tool_calling", "verifier": {"family": "f"}, "tools": TOOLS,
            "messages": [{"role": "user", "content": "Weather?"},
                         {"role": "assistant", "content": None, "tool_calls": [call]}]}


def test_object_arguments_that_satisfy_the_schema_are_valid():
    """Issue 61: tool_calls.py flagged every object `arguments` as toolcall-syntax (the HF convention)."""
    assert flag_row(_call_row({"city": "Oslo"})) == {}
    assert flag_row(_call_row('{"city": "Oslo"}')) == {}
    assert flag_row(_call_row({"city": 7})) == {1: {"toolcall-syntax"}}
    assert flag_row(_call_row({})) == {1: {"toolcall-syntax"}}


def _call(name, arguments):
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}


# OpenAI chat JSONL, as fine-tuning files / vLLM logs / HF exports write it (no harness, no verifier)
CHAT = [
    # line 1, id a1: object arguments that satisfy the schema (kept), reasoning_content: nothing masked, 2 turns
    {"id": "a1", "tools": TOOLS, "messages": [
        {"role": "system", "content": "You answer weather questions."}, {"role": "user", "content": "Oslo?"},
        {"role": "assistant", "content": None, "reasoning_content": "Call the tool.",
         "tool_calls": [_call("get_weather", {"city": "Oslo"})]},
        {"role": "tool", "tool_call_id": "c", "content": "{\"temp\": 3}"},
        {"role": "assistant", "content": "It is 3 degrees.", "reasoning_content": "Report it."}]},
    # line 2, id a2: object arguments failing the schema (city 7) -> toolcall-syntax at 1; blank answer -> stall at 3
    {"id": "a2", "tools": TOOLS, "messages": [
        {"role": "user", "content": "Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [_call("get_weather", {"city": 7})]},
        {"role": "tool", "tool_call_id": "c", "content": "error"},
        {"role": "assistant", "content": ""}]},
    # line 3, no id (row id line-0000003): content-part arrays, reasoning: nothing masked, 1 turn
    {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "assistant", "reasoning_content": "Greet.",
         "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": " there"}]}]},
    # line 4, id 4: legacy `functions` + `function_call` (string arguments, valid) + `function` role; then a
    # whitespace-only answer -> stall at 3; 2 turns
    {"id": 4, "functions": [{"name": "get_weather", "parameters": SCHEMA}], "messages": [
        {"role": "user", "content": "Rome?"},
        {"role": "assistant", "content": None,
         "function_call": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}},
        {"role": "function", "name": "get_weather", "content": "{\"temp\": 20}"},
        {"role": "assistant", "content": "   "}]},
    # line 5, id a5: harness terminus2 without a verifier: "not json" -> terminus-json at 1; false-claim skipped
    {"id": "a5", "harness": "terminus2", "messages": [
        {"role": "user", "content": "Fix the build."}, {"role": "assistant", "content": "not json"}]},
]
CHAT_EXPECTED = {  # hand-computed from the rows above
    "rows": 5, "assistant_turns": 2 + 2 + 1 + 2 + 1, "masked_turns": 4, "rows_touched": 3,
    "reasons": {"stall": 2, "terminus-json": 1, "toolcall-syntax": 1},
    "combinations": {"stall": 2, "terminus-json": 1, "toolcall-syntax": 1}, "left_alone": {},
    "ran": {"stall": 5, "terminus-json": 1, "toolcall-syntax": 3},  # tools on lines 1, 2, 4 (functions)
    "skipped": {"false-claim": 5, "prose-command": 4, "terminus-json": 4},  # 4 rows without harness, a5 no verifier
    "row_ids": {"id": 4, "line": 1},
}
CHAT_MASKS = {"a2": [1, 3], "4": [3], "a5": [1]}

# ShareGPT as LLaMA-Factory writes it: top-level system and tools (a JSON string)
SHAREGPT_TOOLS = json.dumps([{"name": "get_weather", "description": "weather", "parameters": SCHEMA}])
SHAREGPT = [
    # line 1, id s1: a valid function_call with object arguments, observation, answer: nothing masked, 2 turns
    {"id": "s1", "system": "You answer weather questions.", "tools": SHAREGPT_TOOLS, "conversations": [
        {"from": "human", "value": "Weather in Oslo?"},
        {"from": "function_call", "value": json.dumps({"name": "get_weather", "arguments": {"city": "Oslo"}})},
        {"from": "observation", "value": "{\"temp\": 3}"}, {"from": "gpt", "value": "3 degrees."}]},
    # line 2, no id (line-0000002): an empty answer -> stall at 1
    {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": ""}]},
    # line 3, id s3: a call to an undeclared function -> toolcall-syntax at 1; the answer after is fine; 2 turns
    {"id": "s3", "tools": SHAREGPT_TOOLS, "conversations": [
        {"from": "human", "value": "Forecast?"},
        {"from": "function_call", "value": json.dumps({"name": "get_forecast", "arguments": {"city": "Oslo"}})},
        {"from": "observation", "value": "unknown function"}, {"from": "gpt", "value": "Sorry."}]},
    # line 4, id s4, harness mini_swe: a command in prose -> prose-command at 1; plain prose -> prose_only (kept)
    {"id": "s4", "harness": "mini_swe", "conversations": [
        {"from": "system", "value": "You fix repositories."}, {"from": "human", "value": "Fix it."},
        {"from": "gpt", "value": "Run `ls src` to see the files."}, {"from": "gpt", "value": "The fix is complete."}]},
]
SHAREGPT_EXPECTED = {
    "rows": 4, "assistant_turns": 2 + 1 + 2 + 2, "masked_turns": 3, "rows_touched": 3,
    "reasons": {"prose-command": 1, "stall": 1, "toolcall-syntax": 1},
    "combinations": {"prose-command": 1, "stall": 1, "toolcall-syntax": 1}, "left_alone": {"prose_only": 1},
    "ran": {"prose-command": 1, "stall": 4, "toolcall-syntax": 2},
    "skipped": {"false-claim": 3, "prose-command": 3, "terminus-json": 3},
    "row_ids": {"id": 3, "line": 1},
}
SHAREGPT_MASKS = {"line-0000002": [1], "s3": [1], "s4": [2]}


def _sha(content):
    return hashlib.sha256(json.dumps(content, ensure_ascii=False).encode()).hexdigest()


def _write(path, rows, compact_every=2):
    """Rows in two spellings (json.dumps' default and compact) so the splice keeps each one's bytes."""
    path.write_bytes(b"".join(
        (json.dumps(r, separators=(",", ":")) if k % compact_every else json.dumps(r, ensure_ascii=False))
        .encode() + b"\n" for k, r in enumerate(rows)))
    return path


def _run(tmp_path, record, **kw):
    """census -> build -> verify as the assets run them; (census total, build report, verify, masks by row)."""
    fmt = record["format"]
    counted = census_file(record["path"], fmt=fmt)["total"]
    out, flags = tmp_path / "masked.jsonl", tmp_path / "flags.jsonl"
    external = kw.get("flags")
    expected = counted["reasons"] if external is None else external.counts()["reasons"]
    with open(out, "wb") as o, open(flags, "wb") as f:
        report = build_file(record["path"], o, f, expected_reasons=expected, fmt=fmt, **kw)
    checked = verify(record["path"], out, flags, fmt=fmt, rule_flags=external is None)
    array = "conversations" if fmt == "sharegpt" else "messages"
    masks = {}
    for number, (before, after) in enumerate(zip(open(record["path"], "rb"), open(out, "rb")), start=1):
        row, at = json.loads(after), [i for i, m in enumerate(json.loads(after)[array]) if MASK_KEY in m]
        if at:
            masks[canonical_row(row, fmt, where=f"x line {number}")["row_id"]] = at
        else:
            assert after == before  # untouched rows are their input bytes
    return counted, report, checked, masks


@pytest.mark.parametrize("rows, fmt, expected, masks", [
    (CHAT, "openai", CHAT_EXPECTED, CHAT_MASKS), (SHAREGPT, "sharegpt", SHAREGPT_EXPECTED, SHAREGPT_MASKS)])
def test_census_build_verify_equal_the_hand_computed_table(tmp_path, rows, fmt, expected, masks):
    """On the shipped example files, which hold exactly these rows."""
    data = EXAMPLES / ("openai_chat.jsonl" if fmt == "openai" else "sharegpt.jsonl")
    assert [json.loads(line) for line in open(data, "rb")] == rows
    assert detect_format(data) == fmt
    record = register(Store(tmp_path / "store"), "v1", data)
    assert record["format"] == fmt and record["flags"] is None and record["tokenizer"] is None
    counted, report, checked, found = _run(tmp_path, record)
    assert counted == expected
    assert report["rows"] == expected["rows"] and report["reasons"] == expected["reasons"]
    assert checked == {"rows": expected["rows"], "masked_turns": expected["masked_turns"],
                       "rows_byte_identical": expected["rows"] - expected["rows_touched"],
                       "rows_masked_in_place": expected["rows_touched"]}
    assert found == masks
    _pack_counts(tmp_path, record, fmt)


# Packed (B's pack reads rows through canonical_row): rows whose every assistant turn is masked have nothing
# to train -- chat: a2 (turns 1, 3) and a5 (its one turn); ShareGPT: line-0000002 (its one turn); the rest pack.
PACKED = {"openai": {"rows_in": 5, "rows_packed": 3, "rows_no_trainable": 2, "rows_over_limit": 0},
          "sharegpt": {"rows_in": 4, "rows_packed": 3, "rows_no_trainable": 1, "rows_over_limit": 0}}


def _pack_counts(tmp_path, record, fmt):
    from apsft_dagster.core.loss_mask.pack import pack_rows
    from tiny import tiny_tokenizer

    lines = (tmp_path / "masked.jsonl").read_bytes().splitlines(keepends=True)
    _, report = pack_rows(lines, tiny_tokenizer(tmp_path / "tok"), pack_length=4096, shards=1, seed=1, fmt=fmt)
    assert {k: report[k] for k in PACKED[fmt]} == PACKED[fmt] and report["span_anomalies"] == 0


def test_workers_give_the_same_bytes_and_line_ids_for_a_format(tmp_path):
    record = register(Store(tmp_path / "store"), "v1", _write(tmp_path / "s.jsonl", SHAREGPT * 3))
    one = census_file(record["path"], fmt="sharegpt")  # (a census in ranges: test_loss_mask_parallel.py)
    assert one["total"]["row_ids"] == {"id": 9, "line": 3}  # line-0000002, -06, -10: numbered in the whole file
    outs = []
    for workers in (1, 2):
        out, flags = io.BytesIO(), io.BytesIO()
        build_file(record["path"], out, flags, expected_reasons=one["total"]["reasons"], fmt="sharegpt",
                   workers=workers)
        outs.append((out.getvalue(), flags.getvalue()))
    assert outs[0] == outs[1] and b'"row_id": "line-0000010"' in outs[0][1]


@pytest.mark.parametrize("fmt, row, field", [
    ("sharegpt", {"conversations": [{"from": "human", "value": "a"}, {"from": "bot", "value": "b"}]},
     "conversations[1].from"),
    ("sharegpt", {"messages": []}, "conversations"),
    ("sharegpt", {"conversations": [{"from": "gpt", "value": 3}]}, "conversations[0].value"),
    ("sharegpt", {"conversations": [{"from": "function_call", "value": "get_weather(city)"}]},
     "conversations[0].value"),
    ("openai", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]},
     "messages[0].content[0]"),
    ("openai", {"messages": [{"role": "assistant", "content": None, "tool_calls": [_call("f", 5)]}]},
     "messages[0].tool_calls[0].function.arguments"),
    ("openai", {"messages": [{"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": []}}]},
     "messages[0].function_call[0].function.arguments"),
    ("openai", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ("openai", {"messages": [{"role": "user", "content": "x"}], "harness": "swe_agent"}, "harness"),
    ("openai", {"messages": [{"role": "user", "content": "x"}], "verifier": {"passed": True}}, "verifier"),
])
def test_a_bad_row_names_file_line_and_field(tmp_path, fmt, row, field):
    good = CHAT[0] if fmt == "openai" else SHAREGPT[0]
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(LossMaskError) as err:
        census_file(data, fmt=fmt)
    assert f"{data} line 2" in str(err.value) and f"'{field}'" in str(err.value)


def _hf_rows():
    """Rows as a HF chat dataset holds them: arguments as JSON text, one struct schema for every message."""
    def message(role, content, calls=None):
        return {"role": role, "content": content, "tool_calls": calls}
    return [{"id": "h1", "messages": [message("user", "Oslo?"), message("assistant", None, [
                {"id": "c", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]),
             message("tool", "{\"temp\": 3}"), message("assistant", "3 degrees.")], "tools": json.dumps(TOOLS)},
            {"id": "h2", "messages": [message("user", "Hi"), message("assistant", " ")], "tools": None}]


def test_parquet_and_a_datasets_folder_are_staged_to_json_lines(tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _hf_rows()
    for row in rows:  # a list column of tools would need one struct schema too: keep them as declared lists
        row["tools"] = json.loads(row["tools"]) if row["tools"] else None
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "chat.parquet")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "chat_hf"))
    for source in (tmp_path / "chat.parquet", tmp_path / "chat_hf"):
        store = Store(tmp_path / f"store-{source.name}")
        record = register(store, "v1", source)
        assert record["format"] == "openai" and record["staged_from"]["path"] == str(source)
        assert record["staged_from"]["rows"] == 2 and record["path"] == str(store.path("loss_mask/v1/staged.jsonl"))
        staged = [json.loads(line) for line in open(record["path"])]
        assert staged[0]["messages"][0] == {"role": "user", "content": "Oslo?"}  # null struct fields dropped
        assert "tools" not in staged[1]
        counted, _, checked, masks = _run(tmp_path, record)
        # h1: a valid string-argument call and an answer (kept); h2: a whitespace answer -> stall at 1
        assert (counted["rows"], counted["assistant_turns"], counted["reasons"]) == (2, 3, {"stall": 1})
        assert masks == {"h2": [1]} and checked["rows_masked_in_place"] == 1


def test_registration_refuses_missing_paths_before_writing(tmp_path):
    data, store = _write(tmp_path / "chat.jsonl", CHAT), Store(tmp_path / "store")
    with pytest.raises(LossMaskError, match="--tokenizer .* is not a folder"):
        register(store, "v1", data, tokenizer=tmp_path / "nope")
    (tmp_path / "t.jinja").write_bytes(b"\xff\xfe{{")
    with pytest.raises(LossMaskError, match="--chat-template .* does not read as UTF-8"):
        register(store, "v1", data, chat_template=tmp_path / "t.jinja")
    (tmp_path / "hf").mkdir()
    with pytest.raises(LossMaskError, match="no state.json"):
        register(store, "v1", tmp_path / "hf")
    with pytest.raises(LossMaskError, match=r"sharegpt.jsonl line 1 \(read as openai.*field 'messages'"):
        register(store, "v1", EXAMPLES / "sharegpt.jsonl", fmt="openai")
    assert not store.path("loss_mask").exists()
    (tmp_path / "t.jinja").write_text("{{ messages }}")
    record = register(store, "v1", data, fmt="openai", tokenizer=tmp_path, chat_template=tmp_path / "t.jinja")
    assert record["tokenizer"] == str(tmp_path) and record["chat_template"]["sha256"] == hashlib.sha256(
        b"{{ messages }}").hexdigest()


def test_a_sharegpt_rows_top_level_system_prompt_is_packed_as_its_first_turn():
    from apsft_dagster.core.loss_mask.pack_encode import parse_row

    line = json.dumps({"id": "s", "system": "Be brief.", "conversations": [
        {"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello", "step_loss_mask": 0}]}).encode()
    row = parse_row(line, "f.jsonl line 1", "sharegpt")
    assert [(m["role"], m["content"], m.get("step_loss_mask")) for m in row["messages"]] == [
        ("system", "Be brief.", None), ("user", "Hi", None), ("assistant", "Hello", 0)]
    inline = json.dumps({"id": "t", "conversations": [{"from": "system", "value": "S"},
                                                      {"from": "human", "value": "Hi"}]}).encode()
    assert [m["role"] for m in parse_row(inline, "f.jsonl line 2", "sharegpt")["messages"]] == ["system", "user"]
