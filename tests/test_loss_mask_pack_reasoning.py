"""Reasoning turns in the pack, and the end of an assistant turn read from the template: a Qwen3-style
template (its real logic for reasoning_content, last_query_index and the last turn's thought block) that
drops earlier turns' reasoning, the shipped template that folds reasoning into the content, object
`arguments`, and a Llama 3-style template whose turns end with `<|eot_id|>`."""

import json
from pathlib import Path

import pytest

from apsft_dagster.core.families.templates import LLAMA3
from apsft_dagster.core.loss_mask.pack import pack_rows
from apsft_dagster.core.loss_mask.spans import TEMPLATE_FILE, encode_row

# Qwen3's chat_template (tokenizer_config.json): its message loop as published, without the tools preamble
QWEN3 = (Path(__file__).parent / "data" / "qwen3_reasoning.jinja").read_text()
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
ROW = {"row_id": "r1", "messages": [
    {"role": "user", "content": "Add 2 and 3."},
    {"role": "assistant", "content": "ANSWER: 5", "reasoning_content": "two plus three"},  # dropped: a user follows
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": "", "reasoning_content": "call the tool", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "assistant", "content": "It is sunny.", "reasoning_content": "the tool said so"},
]}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from tiny import tiny_tokenizer

    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


def _decode(tokenizer, ids) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False)


def _turns(tokenizer, encoded) -> tuple[list[str], dict[int, str]]:
    """(each message's text, each message's trained text) decoded from the spans."""
    ids, mask = encoded.input_ids, encoded.loss_mask
    texts = [_decode(tokenizer, ids[a:b]) for _, a, b in encoded.spans]
    trained = {m: _decode(tokenizer, [ids[t] for t in range(a, b) if mask[t]]) for m, a, b in encoded.spans}
    return texts, trained


def test_qwen3_drops_earlier_reasoning_and_the_kept_reasoning_trains_with_its_turn(tokenizer):
    encoded = encode_row(ROW, tokenizer, QWEN3)
    texts, trained = _turns(tokenizer, encoded)
    assert not encoded.anomalies and "two plus three" not in "".join(texts)  # the dropped reasoning is not there
    assert texts[1] == "<|im_start|>assistant\nANSWER: 5<|im_end|>\n"
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'  # object as JSON
    assert texts[3] == f"<|im_start|>assistant\n<think>\ncall the tool\n</think>\n\n{call}<|im_end|>\n"
    assert texts[4] == "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
    assert trained == {0: "", 1: "ANSWER: 5<|im_end|>", 2: "",
                       3: f"<think>\ncall the tool\n</think>\n\n{call}<|im_end|>", 4: "",
                       5: "<think>\nthe tool said so\n</think>\n\nIt is sunny.<|im_end|>"}


def test_qwen3_without_reasoning_a_middle_turn_is_cut_as_the_whole_row_renders_it(tokenizer):
    """Qwen3 gives the last assistant turn an empty thought block, so messages[:2] alone is no prefix of
    the whole; the turn is cut where the whole row puts it and trains on what the row renders."""
    row = {"row_id": "r2", "messages": [m for m in (
        {k: v for k, v in m.items() if k != "reasoning_content"} for m in ROW["messages"][2:])]}
    texts, trained = _turns(tokenizer, encode_row(row, tokenizer, QWEN3))
    assert texts[1].startswith("<|im_start|>assistant\n<tool_call>")  # not last: no thought block
    assert trained[3] == "<think>\n\n</think>\n\nIt is sunny.<|im_end|>"  # the last turn's own, trained


def test_the_shipped_template_folds_reasoning_into_the_turn_as_qwen3_writes_it(tokenizer):
    template = TEMPLATE_FILE.read_text()
    texts, trained = _turns(tokenizer, encode_row(ROW, tokenizer, template))
    assert trained[1] == "<think>\ntwo plus three\n</think>\n\nANSWER: 5<|im_end|>"  # every turn keeps its own
    assert trained[5] == "<think>\nthe tool said so\n</think>\n\nIt is sunny.<|im_end|>"
    assert '"arguments": {"city": "Oslo"}' in trained[3]
    frames, report = pack_rows([json.dumps(ROW).encode()], tokenizer, pack_length=1024, shards=1, seed=0)
    assert report["rows_packed"] == 1 and report["trainable_tokens"] == sum(frames[0]["loss_mask"][0])


def test_a_llama3_template_trains_through_its_own_end_of_turn(tokenizer):
    turns = [("user", "Hi"), ("assistant", "Hello"), ("user", "Bye"), ("assistant", "Bye now")]
    row = {"row_id": "l1", "messages": [{"role": r, "content": c} for r, c in turns]}
    texts, trained = _turns(tokenizer, encode_row(row, tokenizer, LLAMA3))
    assert texts[1] == "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>"
    assert trained == {0: "", 1: "Hello<|eot_id|>", 2: "", 3: "Bye now<|eot_id|>"}
