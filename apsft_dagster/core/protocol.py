"""The text protocol: chat-style prompt x, thought z opened by `<think>`, boundary b, answer y*.

Token spans are found on the tokenized whole string through character offsets, never by
tokenizing the pieces apart: merges across a seam (e.g. Qwen's "\\n\\n" token straddling the
prompt/thought seam of an empty thought) would otherwise shift every later span.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
PAD = "<|endoftext|>"
SPECIAL_TOKENS = (PAD, IM_START, IM_END, THINK_OPEN, THINK_CLOSE)
BOUNDARY = THINK_CLOSE + "\n\nANSWER:"
SEGMENTS = ("prompt", "thought", "boundary", "answer", "end")
# Generation stops at the model's own `</think>` (a natural close, never forced) or at its end of turn.
STOP_TOKENS = (THINK_CLOSE, IM_END)


def format_prompt(prompt: str) -> str:
    """x: the user turn and the assistant turn opened with `<think>` (Qwen chat format)."""
    return f"{IM_START}user\n{prompt}{IM_END}\n{IM_START}assistant\n{THINK_OPEN}\n"


def prompt_ids(tokenizer, prompt: str) -> tuple[int, ...]:
    """x as token ids: the formatted prompt tokenized alone, no special tokens added."""
    return tuple(tokenizer(format_prompt(prompt), add_special_tokens=False)["input_ids"])


def format_answer(answer: str) -> str:
    """y* as it follows the boundary: one leading space."""
    return f" {answer}"


def format_thought(solution: str) -> str:
    """A worked solution as a thought: its lines, then the newline that precedes `</think>`."""
    return solution.rstrip("\n") + "\n"


def format_record(prompt: str, thought: str, answer: str) -> str:
    """The whole training record x + z + b + y* + end of turn."""
    return format_prompt(prompt) + thought + BOUNDARY + format_answer(answer) + IM_END


@dataclass(frozen=True)
class Spans:
    """Token index ranges [start, stop) of each segment in `input_ids`."""

    input_ids: list[int]
    prompt: range
    thought: range
    boundary: range
    answer: range
    end: range


def locate_spans(tokenizer, prompt_text: str, thought: str, answer_text: str, end: str = "") -> Spans:
    """Tokenize `prompt_text + thought + BOUNDARY + answer_text + end` once and split by offsets.

    A token belongs to the segment holding its first character, so a token that starts in the
    thought and runs into the boundary counts as thought; tokens without a source character
    (offset (0, 0) additions such as a BOS) count as prompt.
    """
    text = prompt_text + thought + BOUNDARY + answer_text + end
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    cuts = []
    at = 0
    for piece in (prompt_text, thought, BOUNDARY, answer_text):
        at += len(piece)
        cuts.append(at)
    counts = [0] * len(SEGMENTS)
    for start, stop in enc["offset_mapping"]:
        segment = 0 if stop == 0 else bisect_right(cuts, start)
        counts[segment] += 1
    bounds, at = [], 0
    for n in counts:
        bounds.append(range(at, at + n))
        at += n
    return Spans(list(enc["input_ids"]), *bounds)
