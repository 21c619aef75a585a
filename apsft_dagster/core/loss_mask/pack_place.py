"""Where each row goes: its window's seeded order, then first fit over a bounded set of open packs.

Rows are taken in windows of `window` input rows (row k is in window k // window); within a window
the order is a permutation seeded by (pack_seed, window index), the same for a masked build and its
base because both hold the same rows in the same order, and a dropped row's place is skipped. Each
row goes into the first open pack with room; a full pack closes; at most `max_open` stay open, the
oldest closing when another must open. Packs are numbered in the order they close, so a pack is
written the moment it closes and the open packs are the only ones held.
"""

from __future__ import annotations

import random

MAX_OPEN_PACKS = 64


def window_order(seed: int, window: int, n: int) -> list[int]:
    """The order of the `n` rows of window number `window` (positions within the window)."""
    order = list(range(n))
    random.Random(f"apsft-pack:{seed}:{window}").shuffle(order)
    return order


class Placer:
    """First fit over at most `max_open` open packs; `add` and `finish` return the packs that close."""

    def __init__(self, pack_length: int, max_open: int = MAX_OPEN_PACKS):
        self.pack_length, self.max_open = pack_length, max_open
        self.open: list[list] = []  # [room left, members], oldest first

    def add(self, item, length: int) -> list[list]:
        closed = []
        pack = next((p for p in self.open if p[0] >= length), None)
        if pack is None:
            if len(self.open) == self.max_open:
                closed.append(self.open.pop(0)[1])  # the oldest open pack closes, so the search stays bounded
            pack = [self.pack_length, []]
            self.open.append(pack)
        pack[1].append(item)
        pack[0] -= length
        if pack[0] == 0:
            self.open.remove(pack)
            closed.append(pack[1])
        return closed

    def finish(self) -> list[list]:
        """The packs still open, oldest first."""
        rest, self.open = [p[1] for p in self.open], []
        return rest


def place(lengths: list[tuple[int, int]], pack_length: int, max_open: int = MAX_OPEN_PACKS) -> list[list[int]]:
    """The packs (lists of rows) of (row, length) pairs placed in the order given, in the order they close."""
    placer, packs = Placer(pack_length, max_open), []
    for row, length in lengths:
        packs += placer.add(row, length)
    return packs + placer.finish()
