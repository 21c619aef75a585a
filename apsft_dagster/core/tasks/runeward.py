"""runeward: ordered rewrite wards applied once each to the leftmost match in a rune string."""

from __future__ import annotations

import random

RUNES = "AEKLMRST"
MAX_WORD = 10


def _word(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(RUNES) for _ in range(n))


def build(rng: random.Random, level: int, steps: int) -> tuple[str, str, str]:
    word = _word(rng, rng.randint(4, 6))
    start, wards, lines = word, [], [f"Runeword: {word}."]
    for i in range(1, steps + 1):
        if rng.random() < 0.8:
            size = rng.randint(1, min(2, len(word)))
            at = rng.randrange(len(word) - size + 1)
            lhs = word[at:at + size]
        else:
            lhs = _word(rng, 2)
        room = MAX_WORD - len(word) + len(lhs)
        rhs = _word(rng, rng.randint(1, max(1, min(3, room))))
        wards.append(f"{i}. {lhs} -> {rhs}")
        at = word.find(lhs)
        if at < 0:
            lines.append(f"{wards[-1]}: no match, {word} stays.")
            continue
        new = word[:at] + rhs + word[at + len(lhs):]
        lines.append(f"{wards[-1]}: {word} becomes {new}.")
        word = new
    rune = rng.choice(sorted(set(start + "".join(w.split(" -> ")[1] for w in wards))))
    prompt = (f"Runeword: {start}. Apply these wards in order, each once, to the leftmost match "
              "(a ward with no match changes nothing):\n" + "\n".join(wards)
              + f"\nHow many {rune} runes does the final runeword hold?")
    lines.append(f"Final: {word}, {word.count(rune)} x {rune}.")
    return prompt, str(word.count(rune)), "\n".join(lines)
