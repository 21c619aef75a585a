"""Canonical answer form and the parser for model output (`ANSWER: ...`)."""

from __future__ import annotations

import re

ANSWER_TAG = "ANSWER:"
_INT = re.compile(r"[+-]?\d+")
_RATIO = re.compile(r"(\d+):(\d+)")


def normalize_answer(text: str) -> str:
    """Whitespace, a trailing period and case do not matter; integers lose signs '+' and leading zeros."""
    s = re.sub(r"\s+", "", text).rstrip(".").upper()
    if _INT.fullmatch(s):
        return str(int(s))
    ratio = _RATIO.fullmatch(s)
    if ratio:
        return f"{int(ratio[1])}:{int(ratio[2])}"
    return s


def parse_answer(completion: str) -> str | None:
    """The normalized text after the last `ANSWER:` up to the line end; None when absent or empty."""
    at = completion.rfind(ANSWER_TAG)
    if at < 0:
        return None
    tail = completion[at + len(ANSWER_TAG):]
    tail = tail.split("<|im_end|>", 1)[0].strip().split("\n", 1)[0]
    value = normalize_answer(tail)
    return value or None


def is_correct(completion: str, canonical: str) -> bool:
    return parse_answer(completion) == canonical
