"""Reasoning turns and templates that write a turn differently by what follows it, for the pack's spans.

An assistant message's `reasoning_content` is part of its turn and trains with it. A template that does
not read `reasoning_content` (the shipped one) gets it folded into the content as Qwen3 writes it,
`<think>\\n{reasoning}\\n</think>\\n\\n{content}`. A template that renders it itself may drop it from
earlier turns (Qwen3's keeps it only after the last user query): the prefixes whose renderings locate each
message are then rendered with the reasoning removed from exactly the turns the whole rendering dropped
(`as_rendered`), so a dropped reasoning is neither in the text nor trained. A template that writes the
last message differently from the same message followed by another (Qwen3 gives a last assistant turn an
empty thought block) gets the cut `lookahead_cut` finds: messages[:i] rendered followed by a probe message
of message i's role, cut where the probe's header begins.
"""

from __future__ import annotations

from collections.abc import Callable

from apsft_dagster.core.loss_mask.rules import LossMaskError

REASONING = "reasoning_content"
PROBE = "apsft-turn-probe"
Render = Callable[[list], str]  # messages -> the template's rendering of them


def has_reasoning(message: dict) -> bool:
    """An assistant turn with reasoning text (an empty or null `reasoning_content` is none)."""
    reasoning = message.get(REASONING)
    if reasoning is not None and not isinstance(reasoning, str):
        raise LossMaskError(f"field {REASONING!r} must be a string or null, got {type(reasoning).__name__}; "
                            "fix the row")
    return message.get("role") == "assistant" and bool(reasoning and reasoning.strip("\n"))


def without_reasoning(message: dict) -> dict:
    return {k: v for k, v in message.items() if k != REASONING}


def renders_reasoning(render: Render) -> bool:
    """Whether the template writes an assistant turn's `reasoning_content` (probed on a last turn)."""
    return PROBE in render([{"role": "user", "content": "x"},
                            {"role": "assistant", "content": "y", REASONING: PROBE}])


def folded(messages: list) -> list:
    """Each reasoning turn's reasoning written into its content as Qwen3 does; other messages as they are."""
    out = []
    for m in messages:
        if has_reasoning(m):
            content = (m.get("content") or "").lstrip("\n")
            m = {**without_reasoning(m), "content": f"<think>\n{m[REASONING].strip(chr(10))}\n</think>\n\n{content}"}
        else:
            m = without_reasoning(m) if REASONING in m else m
        out.append(m)
    return out


def as_rendered(messages: list, text: str, render: Render) -> list:
    """`messages` with the reasoning removed from each turn whose reasoning the whole rendering `text`
    drops (removing it renders the same text); the result renders `text` too."""
    out = list(messages)
    for j, message in enumerate(messages):
        if has_reasoning(message):
            trial = [*out[:j], without_reasoning(message), *out[j + 1:]]
            if render(trial) == text:
                out = trial
    return out


def header(render: Render, role: str) -> str | None:
    """What the template writes before a `role` message's content after a user turn; None if it
    does not write the content verbatim after the user turn's rendering."""
    probe = [{"role": "user", "content": "x"}]
    plain, written = render(probe), render([*probe, {"role": role, "content": PROBE}])
    if not written.startswith(plain) or written.count(PROBE) != 1:
        return None
    return written[len(plain):written.find(PROBE)]


def lookahead_cut(messages: list, i: int, text: str, render: Render, role_header: str | None) -> int | None:
    """Where message i starts in `text`, from messages[:i] rendered followed by a probe message of
    message i's role: the characters before the probe's header, when `text` starts with them."""
    if role_header is None:
        return None
    rendered = render([*messages[:i], {"role": messages[i]["role"], "content": PROBE}])
    at = rendered.find(PROBE)
    if at < 0 or rendered.count(PROBE) != 1 or not rendered[:at].endswith(role_header):
        return None
    cut = at - len(role_header)
    return cut if text.startswith(rendered[:cut]) else None
