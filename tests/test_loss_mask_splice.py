"""The build's in-place mask: against re-encoding the masked row, and byte for byte against the base.

Expected values come from json.dumps of the row with the mask keys set (what the build wrote
before it spliced), and for lines json.dumps would not write, from two independent facts: the
spliced line parses to the masked row, and deleting the inserted text gives back the base line.
"""

import json
import random

import pytest

from apsft_dagster.core.loss_mask.rules import LossMaskError
from apsft_dagster.core.loss_mask.splice import mask_in_place

KEY = "step_loss_mask"


def _row(rng: random.Random) -> dict:
    texts = ["plain", 'a "quoted" {brace} [bracket] \\ back', "ünï ✓ 🚀 \u2028", "", "messages", '"messages": [']
    messages = [{"role": rng.choice(["user", "assistant", "tool"]), "content": rng.choice(texts + [None])}
                for _ in range(rng.randint(1, 6))]
    if rng.random() < 0.5:
        messages[0]["tool_calls"] = [{"id": "c", "type": "function",
                                      "function": {"name": "f", "arguments": '{"x": [1, {"y": "}"}]}'}}]
    row = {"row_id": f"r{rng.randrange(10**6)}", "source": "s", "harness": "terminus2", "messages": messages,
           "verifier": {"passed": False, "reward": 1e-7, "infra_exception": False, "family": "a"},
           "tools": [{"function": {"name": "f", "parameters": {"messages": [{"a": []}]}}}]}
    keys = list(row)
    rng.shuffle(keys)  # `messages` first, last or in between
    return {k: row[k] for k in keys}


def _masked(row: dict, indices: list[int]) -> dict:
    return {**row, "messages": [{**m, KEY: 0} if i in indices else m for i, m in enumerate(row["messages"])]}


@pytest.mark.parametrize("style", [{}, {"ensure_ascii": False}, {"separators": (",", ":")},
                                   {"separators": (",", ":"), "ensure_ascii": False}])
def test_the_splice_equals_json_dumps_of_the_masked_row_in_the_row_own_style(style):
    rng = random.Random(7)
    for _ in range(300):
        row = _row(rng)
        indices = sorted(rng.sample(range(len(row["messages"])), rng.randint(1, len(row["messages"]))))
        line = json.dumps(row, **style).encode()
        assert mask_in_place(line, indices, len(row["messages"]), row["row_id"], KEY) == \
            json.dumps(_masked(row, indices), **style).encode()


def test_a_line_json_dumps_would_not_write_keeps_every_byte_but_the_insertions():
    row = {"row_id": "r1", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "{]"}]}
    lines = [
        b'{ "row_id" :"r1" ,\t"messages":[ {"role":"user","content":"x"} , {"content":"{]" ,"role":"assistant"}  ] }\n',
        b'{"row_id": "r1", "\\u006dessages": [{"role": "user", "content": "x"}, '
        b'{"role": "assistant", "content": "{]"}]}',
        # a duplicate key: json.loads keeps the last, and so must the mask
        b'{"messages": [{"role": "user"}], "row_id": "r1", "messages": [{"role": "user", "content": "x"}, '
        b'{"role": "assistant", "content": "\\u007b]"}]}\r\n',
        # ... also when the first array is longer than the masked index (its scan may not stop early)
        b'{"messages": [{"role": "user"}, {"role": "user"}, {"role": "user"}], "row_id": "r1", "messages": '
        b'[{"role": "user", "content": "x"}, {"role": "assistant", "content": "{]"}]}',
        '{"row_id": "r1", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "{]"}]}'
        .encode("utf-8-sig"),
    ]
    for line in lines:
        assert json.loads(line) == row
        out = mask_in_place(line, [1], 2, "r1", KEY)
        assert json.loads(out) == _masked(row, [1])
        inserted = b',"step_loss_mask":0' if b'"row_id" :"r1"' in line else b', "step_loss_mask": 0'
        assert out.count(inserted) == 1 and out.replace(inserted, b"") == line


def test_a_line_whose_messages_cannot_be_located_raises_naming_the_row():
    with pytest.raises(LossMaskError, match="row 'r9'.*1 found, 2 parsed"):
        mask_in_place(b'{"row_id": "r9", "messages": [{"role": "user"}]}', [0], 2, "r9", KEY)
    with pytest.raises(LossMaskError, match="row 'r9'.*none found"):
        mask_in_place(b'{"row_id": "r9", "messages": [{"role": "user"}, "x"]}', [0, 1], 2, "r9", KEY)
