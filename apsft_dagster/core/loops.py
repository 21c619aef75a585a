"""Exact periodic loop detection on token ids.

Definition. A sequence's tail is an *exact periodic loop* when its last r * p tokens are r exact
copies of one block of p tokens, with 1 <= p <= `max_period`, r >= `min_repeats` and
r * p >= `min_span`. The defaults are the `full` profile's thresholds (4 repeats, blocks of
1..512 tokens, 64 tokens spanned).

Method. Reverse the sequence so every tail becomes a prefix, and compute the KMP prefix
function pi once (linear time). The prefix of length k (the tail of length k) has smallest
period p_k = k - pi[k-1] and holds floor(k / p_k) whole copies of its first p_k tokens, i.e.
the tail of length floor(k / p_k) * p_k is an exact repeat of the final p_k-token block. Any
tail that repeats a block of length p also repeats its smallest period (Fine and Wilf), so
checking the smallest period of every tail length finds every loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_MIN_REPEATS = 4
DEFAULT_MAX_PERIOD = 512
DEFAULT_MIN_SPAN = 64


@dataclass(frozen=True)
class PeriodicTail:
    period: int  # block length p (the smallest period of the tail)
    repeats: int  # whole copies r of the block at the end of the sequence

    @property
    def span(self) -> int:
        return self.period * self.repeats


def prefix_function(seq: Sequence[int]) -> list[int]:
    """KMP: pi[i] = length of the longest proper border of seq[:i + 1]."""
    pi = [0] * len(seq)
    for i in range(1, len(seq)):
        k = pi[i - 1]
        while k and seq[i] != seq[k]:
            k = pi[k - 1]
        if seq[i] == seq[k]:
            k += 1
        pi[i] = k
    return pi


def find_loop(token_ids: Sequence[int], min_repeats: int = DEFAULT_MIN_REPEATS,
              max_period: int = DEFAULT_MAX_PERIOD, min_span: int = DEFAULT_MIN_SPAN) -> PeriodicTail | None:
    """The qualifying loop with the smallest period, or None.

    Several block lengths may qualify for one tail (a period-2 loop also repeats blocks of 4);
    the smallest period is reported, with the repeats its own tail holds.
    """
    reversed_ids = list(token_ids)[::-1]
    found = None
    for k, border in enumerate(prefix_function(reversed_ids), start=1):
        period = k - border
        repeats = k // period
        if period <= max_period and repeats >= min_repeats and period * repeats >= min_span:
            if found is None or period < found.period or (period == found.period and repeats > found.repeats):
                found = PeriodicTail(period, repeats)
    return found


def is_exact_periodic_loop(token_ids: Sequence[int], min_repeats: int = DEFAULT_MIN_REPEATS,
                           max_period: int = DEFAULT_MAX_PERIOD, min_span: int = DEFAULT_MIN_SPAN) -> bool:
    """True when the tail of `token_ids` is an exact periodic loop (see the module docstring)."""
    return find_loop(token_ids, min_repeats, max_period, min_span) is not None
