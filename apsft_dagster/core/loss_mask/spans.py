"""Rendering a row with its chat template and finding each message's tokens (the loss mask).

Spans come from character offsets (as in `protocol.py`): message i owns the characters between
the renderings of messages[:i] and messages[:i+1], the whole text is tokenized once, and a token
belongs to the message holding its first character. An assistant turn trains from its content
through its `<|im_end|>` (Qwen practice): the `<|im_start|>assistant\\n` header (the template's
generation prompt) and the newline after `<|im_end|>` are loss 0, like every system, user and tool
token and every turn the build masked. A token that starts in the header is header.
"""

from __future__ import annotations

from bisect import bisect_right
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import jinja2

from apsft_dagster.core.loss_mask.build import MASK_KEY
from apsft_dagster.core.loss_mask.rules import LossMaskError
from apsft_dagster.core.protocol import IM_END

TEMPLATE_FILE = Path(__file__).parents[1] / "chat_template.jinja"


class Encoded(NamedTuple):
    """One rendered row: tokens, loss mask, spans, the assistant tokens its masks exclude, anomalies."""

    input_ids: list[int]
    loss_mask: list[int]
    spans: list[tuple[int, int, int]]
    masked_assistant: int
    anomalies: list[str]


def chat_template_for(tokenizer, chat_template: str | None = None) -> str:
    """The tokenizer's own template, else the one given, else the project's Qwen2.5-style file."""
    return tokenizer.chat_template or chat_template or TEMPLATE_FILE.read_text()


def _render(tokenizer, template: str, messages: list, tools, where: str, prompt: bool = False) -> str:
    try:
        return tokenizer.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=False,
                                             add_generation_prompt=prompt)
    except (jinja2.TemplateError, TypeError) as exc:
        raise LossMaskError(f"{where}: the chat template failed ({exc}); fix the row or the template") from None


ANSWER_PROBE = "apsft-answer-probe"


@lru_cache(maxsize=8)  # one per (tokenizer, template): a pack asks for it once per row
def _opener(tokenizer, template: str) -> str:
    """The assistant header: what add_generation_prompt appends to a conversation, as far as a
    written assistant turn carries it before its content. A template whose generation prompt
    also opens the thinking turn (Qwen3.5's: `...assistant\n<think>\n`) writes earlier assistant
    turns without `<think>`: their header is the part the two share."""
    probe = [{"role": "user", "content": "x"}]
    plain = _render(tokenizer, template, probe, None, "the generation-prompt probe")
    opened = _render(tokenizer, template, probe, None, "the generation-prompt probe", prompt=True)
    if not opened.startswith(plain) or opened == plain:
        raise LossMaskError("the chat template appends no assistant header for add_generation_prompt=True; "
                            "use a template that does, so assistant headers can be told from content")
    prompt = opened[len(plain):]
    answered = _render(tokenizer, template, probe + [{"role": "assistant", "content": ANSWER_PROBE}], None,
                       "the assistant-turn probe")
    written = answered[len(plain):answered.find(ANSWER_PROBE)] if answered.startswith(plain) else ""
    return written if written and prompt.startswith(written) else prompt


def _char_bounds(rid: str, messages: list, tools, tokenizer, template: str) -> tuple[str, list[int]]:
    """The rendering and n+1 cuts: message i owns characters [cuts[i], cuts[i+1])."""
    text = _render(tokenizer, template, messages, tools, f"row {rid!r}")
    cuts = [0]
    for i in range(1, len(messages)):
        prefix = _render(tokenizer, template, messages[:i], tools, f"row {rid!r} messages[:{i}]")
        if not text.startswith(prefix) or len(prefix) < cuts[-1]:  # the cuts must ascend for bisect
            raise LossMaskError(f"row {rid!r}: rendering messages[:{i}] is not a prefix of the whole rendering "
                                f"longer than messages[:{i - 1}]'s, so message spans cannot be located; use a "
                                "template whose earlier turns do not depend on later ones")
        cuts.append(len(prefix))
    cuts.append(len(text))
    return text, cuts


def encode_row(row: dict, tokenizer, chat_template: str) -> Encoded:
    """Render with exactly `chat_template`, tokenize once, and derive spans, loss mask and anomalies."""
    rid, messages = row["row_id"], row["messages"]
    clean = [{k: v for k, v in m.items() if k != MASK_KEY} for m in messages]  # the mask never renders
    text, cuts = _char_bounds(rid, clean, row.get("tools"), tokenizer, chat_template)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    first, last = {}, {}
    for t, (start, _) in enumerate(offsets):  # a token belongs to the message holding its first character
        owner = min(bisect_right(cuts, start) - 1, len(messages) - 1)
        first.setdefault(owner, t)
        last[owner] = t
    spans = [(m, first[m], last[m] + 1) if m in first else (m, 0, 0) for m in range(len(messages))]
    mask, masked = [0] * len(ids), 0
    opener, im_end = _opener(tokenizer, chat_template), tokenizer.convert_tokens_to_ids(IM_END)
    for m, start, stop in spans:
        if messages[m]["role"] != "assistant" or stop <= start:  # an empty span is reported as an anomaly
            continue
        trained = _trained_tokens(rid, m, text, cuts, opener, ids[start:stop], offsets[start:stop], im_end)
        if messages[m].get(MASK_KEY) == 0:
            masked += len(trained)
        else:
            for t in trained:
                mask[start + t] = 1
    return Encoded(ids, mask, spans, masked, span_anomalies(messages, mask, spans, offsets, cuts))


def _trained_tokens(rid: str, m: int, text: str, cuts: list[int], opener: str, ids: list[int],
                    offsets: list[tuple[int, int]], im_end: int) -> list[int]:
    """Indices (within the turn) from the first content token through the turn's last `<|im_end|>`."""
    header = text.find(opener, cuts[m], cuts[m + 1])
    if header < 0:
        raise LossMaskError(f"row {rid!r}: message {m} (assistant) does not open with the template's assistant "
                            f"header {opener!r}; fix the template")
    closes = [t for t, token in enumerate(ids) if token == im_end]
    if not closes:
        raise LossMaskError(f"row {rid!r}: message {m} (assistant) has no {IM_END} token; the template must close "
                            "every assistant turn with it")
    content_start = header + len(opener)
    return [t for t in range(closes[-1] + 1) if offsets[t][0] >= content_start]


def span_anomalies(messages: list, loss_mask: list[int], spans: list[tuple[int, int, int]],
                   offsets: list[tuple[int, int]], cuts: list[int]) -> list[str]:
    """Spans must tile the tokens, one non-empty span per message in order, each starting at the token
    holding its message's first character; loss only on assistant turns the build did not mask."""
    problems, at = [], 0
    for m, start, stop in spans:
        role = messages[m]["role"]
        if start != at or stop <= start:
            problems.append(f"message {m} ({role}): tokens [{start}, {stop}) are not one non-empty span "
                            f"continuing at token {at}")
        elif not offsets[start][0] <= cuts[m] < offsets[start][1]:
            problems.append(f"message {m} ({role}): its span starts at token {start} with characters "
                            f"{offsets[start]}, not at the token holding its first character {cuts[m]}")
        if (role != "assistant" or messages[m].get(MASK_KEY) == 0) and any(loss_mask[start:stop]):
            problems.append(f"message {m} ({role}): trained tokens in a turn that must not train")
        at = max(at, stop)
    if at != len(loss_mask):
        problems.append(f"tokens [{at}, {len(loss_mask)}) belong to no message")
    return problems


def checked(rid: str, encoded: Encoded) -> Encoded:
    """Any span anomaly fails the row (fail closed): a wrong span would train on the wrong tokens."""
    if encoded.anomalies:
        raise LossMaskError(f"row {rid!r}: span integrity failed: {'; '.join(encoded.anomalies)}; "
                            "the template or tokenizer splits turns unexpectedly")
    return encoded


def render_spans(row: dict, tokenizer, chat_template: str) -> tuple[list[int], list[int], list[tuple[int, int, int]]]:
    """(input_ids, loss_mask 0/1 per token, spans) for one row. spans = [(message_index, token_start,
    token_stop)] for every message. Raises LossMaskError naming the row on any span anomaly."""
    encoded = checked(row["row_id"], encode_row(row, tokenizer, chat_template))
    return encoded.input_ids, encoded.loss_mask, encoded.spans
