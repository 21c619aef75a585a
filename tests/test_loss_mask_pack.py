"""Packing against values computed apart: hand-written renderings, decoded spans, re-rendered rows."""

import io
import json
from collections import Counter

import pytest

from apsft_dagster.core.loss_mask import LossMaskError
from apsft_dagster.core.loss_mask.build import build
from apsft_dagster.core.loss_mask.census import census
from apsft_dagster.core.loss_mask.dataset import TOOLS, planted_rows
from apsft_dagster.core.loss_mask.pack import pack_rows
from apsft_dagster.core.loss_mask.pack_compare import pack_comparison
from apsft_dagster.core.loss_mask.pack_place import place
from apsft_dagster.core.loss_mask.spans import (
    TEMPLATE_FILE,
    chat_template_for,
    encode_row,
    render_spans,
    span_anomalies,
)

PACK = 768  # the planted rows run to about 1000 tokens here, so some are over the limit
END = "<|im_end|>"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """The tiny models' tokenizer (tests/tiny.py), saved and loaded as a model directory would be."""
    from tiny import tiny_tokenizer

    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def template():
    return TEMPLATE_FILE.read_text()


def _call(arguments: str) -> dict:
    return {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}


HAND = {"row_id": "hand-1", "tools": TOOLS, "messages": [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": "Let me check.", "tool_calls": [_call('{"city": "Oslo"}')]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "assistant", "content": None, "tool_calls": [_call('{"city": "Oslo", "days": 2}')]},
    {"role": "tool", "tool_call_id": "c1", "content": None},
    {"role": "assistant", "content": "It is sunny in Oslo."},
]}
TOOLS_BLOCK = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
    "signatures within <tools></tools> XML tags:\n<tools>\n" + json.dumps(TOOLS[0]) + "\n</tools>\n\nFor each "
    "function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
CALL_1 = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
CALL_2 = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>'
# What each message of HAND renders to, written out by hand, and what each assistant turn trains on.
HAND_CHUNKS = [
    f"<|im_start|>system\nYou are an agent.\n\n{TOOLS_BLOCK}{END}\n",
    f"<|im_start|>user\nWeather in Oslo?{END}\n",
    f"<|im_start|>assistant\nLet me check.\n{CALL_1}{END}\n",
    f"<|im_start|>user\n<tool_response>\nsunny\n</tool_response>{END}\n",
    f"<|im_start|>assistant\n{CALL_2}{END}\n",
    f"<|im_start|>user\n<tool_response>\n\n</tool_response>{END}\n",
    f"<|im_start|>assistant\nIt is sunny in Oslo.{END}\n",
]
HAND_TRAINED = {2: f"Let me check.\n{CALL_1}{END}", 4: f"{CALL_2}{END}", 6: f"It is sunny in Oslo.{END}"}


def _decode(tokenizer, ids) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False)


def _masked(row: dict, *indices: int) -> dict:
    messages = [{**m, "step_loss_mask": 0} if i in indices else m for i, m in enumerate(row["messages"])]
    return {**row, "messages": messages}


def test_the_shipped_template_renders_qwen_chatml_with_tools_and_ignores_the_mask_key(tokenizer, template):
    text = tokenizer.apply_chat_template(HAND["messages"], tools=TOOLS, chat_template=template, tokenize=False)
    assert text == "".join(HAND_CHUNKS)
    assert tokenizer.chat_template is None and chat_template_for(tokenizer) == template
    assert render_spans(_masked(HAND, 2, 6), tokenizer, template)[0] == render_spans(HAND, tokenizer, template)[0]


def test_each_span_decodes_to_its_message_and_the_loss_to_assistant_content_through_im_end(tokenizer, template):
    ids, mask, spans = render_spans(HAND, tokenizer, template)
    assert [m for m, _, _ in spans] == list(range(len(HAND_CHUNKS)))
    assert [_decode(tokenizer, ids[a:b]) for _, a, b in spans] == HAND_CHUNKS
    for m, a, b in spans:
        trained = _decode(tokenizer, [t for t, keep in zip(ids[a:b], mask[a:b]) if keep])
        assert trained == HAND_TRAINED.get(m, ""), m  # tool responses, user and system: loss 0
    # the trained tokens of a turn are one run: the header before them and the newline after are loss 0
    for m, a, b in spans:
        ones = [t for t in range(a, b) if mask[t]]
        assert ones == (list(range(ones[0], b - 1)) if m in HAND_TRAINED else []), m


def test_a_masked_turn_trains_nothing_while_its_sibling_keeps_its_loss(tokenizer, template):
    ids, mask, spans = render_spans(HAND, tokenizer, template)
    encoded = encode_row(_masked(HAND, 4), tokenizer, template)
    assert encoded.input_ids == ids
    a, b = spans[4][1:]
    assert encoded.loss_mask[a:b] == [0] * (b - a)
    assert encoded.loss_mask[:a] == mask[:a] and encoded.loss_mask[b:] == mask[b:]
    alone = tokenizer(HAND_TRAINED[4], add_special_tokens=False)["input_ids"]
    assert encoded.masked_assistant == sum(mask[a:b]) == len(alone)


def test_a_token_straddling_two_turns_is_a_span_anomaly_naming_the_row(tokenizer):
    bare = (r"{%- for m in messages %}{%- if m.role == 'assistant' %}{{ '<|im_start|>assistant\n' + m.content + "
            r"'<|im_end|>' }}{%- else %}{{ m.content }}{%- endif %}{%- endfor %}"
            r"{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{%- endif %}")
    row = {"row_id": "seam", "messages": [{"role": "user", "content": "A"}, {"role": "user", "content": "dd"},
                                          {"role": "assistant", "content": "ok"}]}
    assert tokenizer.tokenize("Add") == ["Add"]  # one token that starts in message 0 and covers message 1
    with pytest.raises(LossMaskError, match=r"row 'seam': span integrity failed: message 1 \(user\)"):
        pack_rows([json.dumps(row).encode()], tokenizer, pack_length=64, shards=1, seed=0, chat_template=bare)


def test_span_anomalies_catch_loss_outside_assistant_turns_and_a_broken_tiling(tokenizer, template):
    text = tokenizer.apply_chat_template(HAND["messages"], tools=TOOLS, chat_template=template, tokenize=False)
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    cuts = [sum(len(c) for c in HAND_CHUNKS[:i]) for i in range(len(HAND_CHUNKS))]
    _, mask, spans = render_spans(HAND, tokenizer, template)
    assert span_anomalies(HAND["messages"], mask, spans, offsets, cuts) == []
    user = [1 if spans[1][1] <= t < spans[1][2] else v for t, v in enumerate(mask)]
    assert span_anomalies(HAND["messages"], user, spans, offsets, cuts) == [
        "message 1 (user): trained tokens in a turn that must not train"]
    shifted = [spans[0], (1, spans[1][1] + 1, spans[1][2]), *spans[2:]]
    assert span_anomalies(HAND["messages"], mask, shifted, offsets, cuts)[0].startswith("message 1 (user): tokens")


def test_a_template_that_rewrites_earlier_turns_is_refused(tokenizer):
    counting = "{{ messages | length }}{% for m in messages %}{{ m.content }}<|im_end|>{% endfor %}"
    with pytest.raises(LossMaskError, match=r"row 'hand-1': rendering messages\[:1\] is not a prefix"):
        render_spans(HAND, tokenizer, counting)


def test_the_tokenizers_own_template_comes_first(tokenizer, template):
    from transformers import AutoTokenizer

    own = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    assert chat_template_for(own, "given") == "given"
    own.chat_template = template + " "
    assert chat_template_for(own, "given") == template + " "


def test_bad_input_is_refused_naming_the_line_or_row_and_empty_shards_keep_the_schema(tokenizer):
    line = json.dumps(HAND).encode()
    # drops are accounted by input position (a stream keeps no set of ids): a repeated id is two rows
    _, twice = pack_rows([line, b"\n", line], tokenizer, pack_length=PACK, shards=1, seed=0)
    assert [(d["row"], d["row_id"]) for d in twice["dropped"]] == [(0, "hand-1"), (1, "hand-1")]
    with pytest.raises(LossMaskError, match="line 2: not valid JSON"):
        pack_rows([line, b"{"], tokenizer, pack_length=PACK, shards=1, seed=0)
    frames, report = pack_rows([line], tokenizer, pack_length=1024, shards=3, seed=0)  # HAND is over PACK
    assert [len(f) for f in frames] == [1, 0, 0] and all(f.schema == frames[0].schema for f in frames)
    assert report["packs"] == 1 and report["masked_assistant_tokens"] == 0


def test_placement_is_first_fit_over_the_open_packs():
    lengths = list(enumerate([6, 5, 4, 3, 2]))
    assert place(lengths, 10) == [[0, 2], [1, 3, 4]]  # 4 fills pack 0, which then closes
    assert place(lengths, 10, max_open=1) == [[0], [1, 2], [3, 4]]  # 5 cannot wait for pack 0
    assert place([(0, 10), (1, 1)], 10) == [[0], [1]]


@pytest.fixture(scope="module")
def planted(tokenizer):
    """(base lines, masked build lines, masked frames, masked report) for 300 planted rows."""
    base = [json.dumps(row).encode() + b"\n" for row, _ in planted_rows(300, seed=3)]
    out = io.BytesIO()
    build(base, out, io.BytesIO(), expected_reasons=census(base)["total"]["reasons"])
    masked = out.getvalue().splitlines(keepends=True)
    frames, report = pack_rows(masked, tokenizer, pack_length=PACK, shards=3, seed=11)
    return base, masked, frames, report


def test_packs_are_full_length_and_hold_exactly_the_kept_rows_as_rendered(tokenizer, template, planted):
    _, masked, frames, report = planted
    rendered = {r["row_id"]: render_spans(r, tokenizer, template)[:2] for r in map(json.loads, masked)}
    over = {r for r, (ids, _) in rendered.items() if len(ids) > PACK}
    empty = {r for r, (ids, mask) in rendered.items() if len(ids) <= PACK and not any(mask)}
    assert over and empty  # the planted data exercises both drops
    order = list(rendered)
    assert report["dropped"] == [  # in input order, with each row's input position
        {"row": order.index(r), "row_id": r, "reason": "over_limit" if r in over else "no_trainable",
         "tokens": len(rendered[r][0])} for r in order if r in over | empty]
    packed, trained, pack_ids = Counter(), 0, []
    for shard, frame in enumerate(frames):
        assert frame["pack_id"].to_list() == sorted(frame["pack_id"]) and all(p % 3 == shard for p in frame["pack_id"])
        for pack in frame.iter_rows(named=True):
            pack_ids.append(pack["pack_id"])
            ids, mask, lens = pack["input_ids"], pack["loss_mask"], pack["seq_lens"]
            pad = PACK - sum(lens)
            assert len(ids) == len(mask) == len(pack["position_ids"]) == PACK and pad >= 0
            assert pack["position_ids"] == [p for n in [*lens, pad] for p in range(n)]
            at = 0
            for row_id, n in zip(pack["row_ids"], lens):
                assert (ids[at:at + n], mask[at:at + n]) == rendered[row_id], row_id
                at += n
            assert ids[at:] == [tokenizer.pad_token_id] * pad and mask[at:] == [0] * pad
            packed.update(pack["row_ids"])
            trained += sum(mask)
    assert sorted(pack_ids) == list(range(report["packs"]))
    assert packed == Counter(set(rendered) - over - empty)
    tokens = sum(len(rendered[r][0]) for r in packed)
    assert (report["rows_in"], report["rows_packed"], report["tokens"], report["trainable_tokens"]) == (
        300, len(packed), tokens, trained)
    assert (report["rows_over_limit"], report["rows_no_trainable"]) == (len(over), len(empty))
    assert report["span_anomalies"] == 0
    assert report["pad_tokens"] == report["packs"] * PACK - tokens
    assert report["efficiency"] == tokens / (report["packs"] * PACK) and report["loss_coverage"] == trained / tokens
    assert json.loads(json.dumps(report)) == report


def test_the_same_seed_packs_identically_and_another_seed_reorders(tokenizer, planted):
    _, masked, frames, report = planted
    again, report_again = pack_rows(masked, tokenizer, pack_length=PACK, shards=3, seed=11)
    assert report_again == report and all(a.equals(b) for a, b in zip(again, frames, strict=True))
    other, report_other = pack_rows(masked, tokenizer, pack_length=PACK, shards=3, seed=12)
    order = [r for f in frames for r in f["row_ids"].explode().to_list()]
    assert [r for f in other for r in f["row_ids"].explode().to_list()] != order
    assert report_other["tokens"] == report["tokens"] and report_other["dropped"] == report["dropped"]


def test_base_and_masked_packings_compare_accounted_and_a_tampered_report_does_not(tokenizer, template, planted):
    base_lines, masked_lines, _, masked = planted
    _, base = pack_rows(base_lines, tokenizer, pack_length=PACK, shards=3, seed=11)
    result = pack_comparison(base, masked, base["dropped"], masked["dropped"])
    assert result["accounted"] and result["problems"] == []
    table = {r["metric"]: r for r in result["table"]}
    assert list(table) == ["rows_in", "rows_packed", "packs", "tokens", "efficiency", "rows_over_limit",
                           "rows_no_trainable"]
    lost = {d["row_id"] for d in masked["dropped"]} - {d["row_id"] for d in base["dropped"]}
    assert lost and table["rows_packed"]["delta"] == -len(lost) and table["rows_over_limit"]["delta"] == 0
    # the masked build loses exactly its masked assistant tokens and what the dropped rows trained in base
    lost_trained = sum(sum(render_spans(r, tokenizer, template)[1])
                       for r in map(json.loads, base_lines) if r["row_id"] in lost)
    assert base["trainable_tokens"] - masked["trainable_tokens"] == masked["masked_assistant_tokens"] + lost_trained
    tampered = pack_comparison(base, {**masked, "tokens": masked["tokens"] + 1}, base["dropped"], masked["dropped"])
    assert not tampered["accounted"] and len(tampered["problems"]) == 1
    assert tampered["problems"][0].startswith(f"tokens: base - masked = {base['tokens'] - masked['tokens'] - 1} but")
    relabelled = [{**d, "reason": "over_limit"} if d["row_id"] == min(lost) else d for d in masked["dropped"]]
    problems = pack_comparison(base, masked, base["dropped"], relabelled)["problems"]
    assert any(p.startswith("rows_over_limit") for p in problems)
    assert any(min(lost) in p and "another reason" in p for p in problems)


def test_a_template_that_opens_the_thinking_turn_packs_the_same_spans(tokenizer, template):
    """Qwen3.5's generation prompt also opens `<think>` (the embedded model's template does too), while
    earlier assistant turns render without it: the header is then the prompt's first line, so the
    tokens, spans and loss mask are the shipped template's."""
    from apsft_dagster.core.embedded.layout import chat_template

    thinking = chat_template("qwen3_5")
    assert thinking != template
    for row in (HAND, _masked(HAND, 4)):
        assert render_spans(row, tokenizer, thinking) == render_spans(row, tokenizer, template)


# A hand-written template with the habit of Qwen3.5's own: an assistant turn before the last user turn
# renders without its reasoning (what precedes `</think>`), so a later turn changes an earlier one.
DROPS_EARLIER_REASONING = (
    "{%- set ns = namespace(last_user=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}"
    "{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}{%- set content = m.content if m.content is string else '' %}"
    "{%- if m.role == 'assistant' and loop.index0 < ns.last_user and '</think>' in content %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>' + m.role + '\\n' + content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
REASONED = {"row_id": "reasoned-1", "messages": [
    {"role": "user", "content": "Add 2 and 3."},
    {"role": "assistant", "content": "<think>\n2 + 3 = 5\n</think>\n\nANSWER: 5"},
    {"role": "user", "content": "And 4 more?"},
    {"role": "assistant", "content": "<think>\n5 + 4 = 9\n</think>\n\nANSWER: 9"},
]}


@pytest.fixture(scope="module")
def real_tokenizer():
    from apsft_dagster.core.qwen35.tokenizer import load_qwen35_tokenizer

    return load_qwen35_tokenizer()


def test_on_qwen35s_real_tokenizer_the_spans_are_the_hand_written_renderings(real_tokenizer, template):
    encoded = encode_row(HAND, real_tokenizer, template)
    assert [_decode(real_tokenizer, encoded.input_ids[a:b]) for _, a, b in encoded.spans] == HAND_CHUNKS
    assert real_tokenizer.convert_tokens_to_ids("<tool_call>") == 248058 and 248058 in encoded.input_ids
    trained = [t for t, keep in zip(encoded.input_ids, encoded.loss_mask) if keep]
    assert _decode(real_tokenizer, trained) == "".join(HAND_TRAINED.values()) and not encoded.anomalies
    reasoned = encode_row(REASONED, real_tokenizer, template)  # the shipped template keeps every turn's reasoning
    assert reasoned.input_ids.count(real_tokenizer.convert_tokens_to_ids("</think>")) == 2 and not reasoned.anomalies


def test_a_template_that_drops_earlier_turns_reasoning_packs_what_the_whole_row_renders(real_tokenizer, template):
    """A template that drops earlier turns' reasoning (as Qwen3.5's own does) renders messages[:2] with
    turn 1's thought but the whole row without it: turn 1 is then cut where the whole rendering puts it
    (messages[:2] rendered before a probe user turn, reasoning.py lookahead_cut), so it trains on its answer
    alone and the dropped thought is in neither the text nor the loss (this row was refused before)."""
    encoded = encode_row(REASONED, real_tokenizer, DROPS_EARLIER_REASONING)
    texts = [_decode(real_tokenizer, encoded.input_ids[a:b]) for _, a, b in encoded.spans]
    assert texts == ["<|im_start|>user\nAdd 2 and 3.<|im_end|>\n", "<|im_start|>assistant\nANSWER: 5<|im_end|>\n",
                     "<|im_start|>user\nAnd 4 more?<|im_end|>\n",
                     "<|im_start|>assistant\n<think>\n5 + 4 = 9\n</think>\n\nANSWER: 9<|im_end|>\n"]
    trained = _decode(real_tokenizer, [t for t, keep in zip(encoded.input_ids, encoded.loss_mask) if keep])
    assert trained == "ANSWER: 5<|im_end|><think>\n5 + 4 = 9\n</think>\n\nANSWER: 9<|im_end|>"
    assert not encoded.anomalies
