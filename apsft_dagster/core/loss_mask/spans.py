"""Rendering a row with its chat template and finding each message's tokens (the loss mask).

Spans come from character offsets (as in `protocol.py`): message i owns the characters between
the renderings of messages[:i] and messages[:i+1], the whole text is tokenized once, and a token
belongs to the message holding its first character. An assistant turn trains from its content
through the template's end of turn (Qwen practice; the end is what the template writes after an
assistant turn's content, trailing whitespace off: Qwen's `<|im_end|>`, Llama 3's `<|eot_id|>`,
Mistral's `</s>`): the assistant header (the template's generation prompt) and the newline after
the end are loss 0, like every system, user and tool token and every turn the build masked. A token
that starts in the header is header. Reasoning turns and templates that write a turn differently by
what follows it: reasoning.py.
"""

from __future__ import annotations

from functools import lru_cache, partial
from itertools import chain
from pathlib import Path
from typing import NamedTuple

import jinja2
import numpy as np

from apsft_dagster.core.loss_mask import reasoning
from apsft_dagster.core.loss_mask.build import MASK_KEY
from apsft_dagster.core.loss_mask.rules import LossMaskError

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
def _turn_marks(tokenizer, template: str) -> tuple[str, str]:
    """(the assistant header, the end of an assistant turn). The header: what add_generation_prompt
    appends to a conversation, as far as a written assistant turn carries it before its content. A
    template whose generation prompt also opens the thinking turn (Qwen3.5's: `...assistant\\n<think>\\n`)
    writes earlier assistant turns without `<think>`: their header is the part the two share. A template
    with no generation prompt (Mistral's) has an empty header only if it writes none before a reply
    either. The end: what the template writes after a written assistant turn's content, right-stripped."""
    probe = [{"role": "user", "content": "x"}]
    plain = _render(tokenizer, template, probe, None, "the generation-prompt probe")
    opened = _render(tokenizer, template, probe, None, "the generation-prompt probe", prompt=True)
    answered = _render(tokenizer, template, probe + [{"role": "assistant", "content": ANSWER_PROBE}], None,
                       "the assistant-turn probe")
    written = answered[len(plain):answered.find(ANSWER_PROBE)] if answered.startswith(plain) else None
    end = answered[answered.find(ANSWER_PROBE) + len(ANSWER_PROBE):].rstrip() if ANSWER_PROBE in answered else ""
    if not end:
        raise LossMaskError(f"the chat template writes nothing after an assistant turn's content ({answered!r}); "
                            "use a template that ends each assistant turn with an end-of-turn token")
    if not opened.startswith(plain) or (opened == plain and written != ""):
        raise LossMaskError("the chat template appends no assistant header for add_generation_prompt=True; "
                            "use a template that does, so assistant headers can be told from content")
    prompt = opened[len(plain):]
    return (written if written and prompt.startswith(written) else prompt), end


@lru_cache(maxsize=32)
def _role_header(tokenizer, template: str, role: str) -> str | None:
    return reasoning.header(partial(_render_as, tokenizer, template, None, "the header probe"), role)


@lru_cache(maxsize=8)
def _renders_reasoning(tokenizer, template: str) -> bool:
    return reasoning.renders_reasoning(partial(_render_as, tokenizer, template, None, "the reasoning probe"))


def _render_as(tokenizer, template: str, tools, where: str, messages: list) -> str:
    return _render(tokenizer, template, messages, tools, where)


def _char_bounds(rid: str, messages: list, tools, tokenizer, template: str) -> tuple[str, list[int]]:
    """The rendering and n+1 cuts: message i owns characters [cuts[i], cuts[i+1])."""
    render = partial(_render_as, tokenizer, template, tools, f"row {rid!r}")
    text = render(messages)
    cuts, seen = [0], messages
    for i in range(1, len(messages)):
        prefix = render(seen[:i])
        if not text.startswith(prefix) and seen is messages and any(map(reasoning.has_reasoning, messages)):
            seen = reasoning.as_rendered(messages, text, render)  # prefixes without the reasoning text drops
            prefix = render(seen[:i])
        cut = len(prefix) if text.startswith(prefix) else reasoning.lookahead_cut(
            seen, i, text, render, _role_header(tokenizer, template, seen[i]["role"]))
        if cut is None or cut < cuts[-1]:  # the cuts must ascend for the token search
            raise LossMaskError(f"row {rid!r}: rendering messages[:{i}] is not a prefix of the whole rendering "
                                f"longer than messages[:{i - 1}]'s, so message spans cannot be located; use a "
                                "template whose earlier turns do not depend on later ones")
        cuts.append(cut)
    cuts.append(len(text))
    return text, cuts


def _tokenize(tokenizer, text: str) -> tuple[np.ndarray, np.ndarray]:
    """(ids, (start, stop) character offsets per token) of `text` tokenized once, no special tokens added;
    through the fast tokenizer's own backend where there is one (the same encoding, less overhead)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        enc = backend.encode(text, add_special_tokens=False)
        ids, offsets = enc.ids, enc.offsets
    else:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
    flat = np.fromiter(chain.from_iterable(offsets), np.int64, count=2 * len(ids))  # twice asarray's speed
    return np.fromiter(ids, np.int32, count=len(ids)), flat.reshape(-1, 2)


def prepared(row: dict, tokenizer, chat_template: str) -> list:
    """The messages as rendered: the mask key off (it never renders), reasoning folded into the content
    for a template that does not write `reasoning_content` itself."""
    clean = [{k: v for k, v in m.items() if k != MASK_KEY} for m in row["messages"]]
    if any(reasoning.REASONING in m for m in clean) and not _renders_reasoning(tokenizer, chat_template):
        return reasoning.folded(clean)
    return clean


def encode_arrays(row: dict, tokenizer, chat_template: str) -> tuple[np.ndarray, np.ndarray, list, int, list[str]]:
    """Render with exactly `chat_template`, tokenize once, and derive spans, loss mask and anomalies:
    (ids int32, mask uint8, spans, masked assistant tokens, anomalies)."""
    rid, messages = row["row_id"], row["messages"]
    text, cuts = _char_bounds(rid, prepared(row, tokenizer, chat_template), row.get("tools"), tokenizer,
                              chat_template)
    ids, offsets = _tokenize(tokenizer, text)
    starts = offsets[:, 0]
    # a token belongs to the message holding its first character
    owner = np.minimum(np.searchsorted(np.asarray(cuts), starts, side="right") - 1, len(messages) - 1)
    present, first = np.unique(owner, return_index=True)
    last = len(owner) - 1 - np.unique(owner[::-1], return_index=True)[1]
    bounds = {int(m): (int(a), int(b) + 1) for m, a, b in zip(present, first, last)}
    spans = [(m, *bounds.get(m, (0, 0))) for m in range(len(messages))]
    mask, masked = np.zeros(len(ids), np.uint8), 0
    opener, end = _turn_marks(tokenizer, chat_template)
    for m, start, stop in spans:
        if messages[m]["role"] != "assistant" or stop <= start:  # an empty span is reported as an anomaly
            continue
        trained = start + _trained_tokens(rid, m, text, cuts, opener, end, starts[start:stop])
        if messages[m].get(MASK_KEY) == 0:
            masked += len(trained)
        else:
            mask[trained] = 1
    return ids, mask, spans, masked, span_anomalies(messages, mask, spans, offsets, cuts)


def encode_row(row: dict, tokenizer, chat_template: str) -> Encoded:
    """encode_arrays as lists (one row at a time: tests and tools)."""
    ids, mask, spans, masked, anomalies = encode_arrays(row, tokenizer, chat_template)
    return Encoded(ids.tolist(), mask.tolist(), spans, masked, anomalies)


def _trained_tokens(rid: str, m: int, text: str, cuts: list[int], opener: str, end: str,
                    starts: np.ndarray) -> np.ndarray:
    """Indices (within the turn) of the tokens starting from the first content character through the
    turn's last end of turn."""
    header = text.find(opener, cuts[m], cuts[m + 1])
    if header < 0:
        raise LossMaskError(f"row {rid!r}: message {m} (assistant) does not open with the template's assistant "
                            f"header {opener!r}; fix the template")
    content_start = header + len(opener)
    closed = text.rfind(end, content_start, cuts[m + 1])
    if closed < 0:
        raise LossMaskError(f"row {rid!r}: message {m} (assistant) has no {end!r}; the template must close "
                            "every assistant turn with it")
    return np.flatnonzero((starts >= content_start) & (starts < closed + len(end)))


def span_anomalies(messages: list, loss_mask, spans: list[tuple[int, int, int]], offsets, cuts: list[int]) -> list[str]:
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
                            f"{tuple(int(o) for o in offsets[start])}, not at the token holding its first character "
                            f"{cuts[m]}")
        if (role != "assistant" or messages[m].get(MASK_KEY) == 0) and any(loss_mask[start:stop]):
            problems.append(f"message {m} ({role}): trained tokens in a turn that must not train")
        at = max(at, stop)
    if at != len(loss_mask):
        problems.append(f"tokens [{at}, {len(loss_mask)}) belong to no message")
    return problems


def checked(rid: str, encoded):
    """Any span anomaly fails the row (fail closed): a wrong span would train on the wrong tokens."""
    if encoded[-1]:
        raise LossMaskError(f"row {rid!r}: span integrity failed: {'; '.join(encoded[-1])}; "
                            "the template or tokenizer splits turns unexpectedly")
    return encoded


def render_spans(row: dict, tokenizer, chat_template: str) -> tuple[list[int], list[int], list[tuple[int, int, int]]]:
    """(input_ids, loss_mask 0/1 per token, spans) for one row. spans = [(message_index, token_start,
    token_stop)] for every message. Raises LossMaskError naming the row on any span anomaly."""
    encoded = checked(row["row_id"], encode_row(row, tokenizer, chat_template))
    return encoded.input_ids, encoded.loss_mask, encoded.spans
