"""spindle (held family): a pointer on a dial of m marks through turns, repeated turns and reflections."""

from __future__ import annotations

import random


def build(rng: random.Random, level: int, steps: int) -> tuple[str, str, str]:
    m = rng.randint(6, 16)
    p = rng.randrange(m)
    opening = f"A spindle dial has {m} marks numbered 0 to {m - 1}. The pointer starts at mark {p}. "
    events, lines = [], [f"The pointer starts at mark {p}: {p} of {m}."]
    for _ in range(steps):
        kinds = (["forward", "back"] + (["repeat"] if level >= 2 else [])
                 + (["opposite", "mirror"] if level >= 3 else []))
        kind = rng.choice(kinds)
        if kind == "opposite" and m % 2:
            kind = "mirror"
        if kind == "forward":
            a = rng.randint(1, 2 * m)
            events.append(f"It turns forward {a} marks.")
            lines.append(f"{events[-1][:-1]}: ({p} + {a}) mod {m} = {(p + a) % m}.")
            p = (p + a) % m
        elif kind == "back":
            b = rng.randint(1, 2 * m)
            events.append(f"It turns back {b} marks.")
            lines.append(f"{events[-1][:-1]}: ({p} - {b}) mod {m} = {(p - b) % m}.")
            p = (p - b) % m
        elif kind == "repeat":
            c, k = rng.randint(2, 9), rng.randint(2, 5)
            events.append(f"It turns forward {c} marks, {k} times in a row.")
            lines.append(f"{events[-1][:-1]}: {c} x {k} = {c * k}, ({p} + {c * k}) mod {m} = {(p + c * k) % m}.")
            p = (p + c * k) % m
        elif kind == "opposite":
            events.append("It jumps to the opposite mark.")
            lines.append(f"{events[-1][:-1]}: ({p} + {m // 2}) mod {m} = {(p + m // 2) % m}.")
            p = (p + m // 2) % m
        else:
            events.append(f"It is mirrored: mark k moves to mark ({m} - k) mod {m}.")
            lines.append(f"{events[-1][:-1]}: ({m} - {p}) mod {m} = {(m - p) % m}.")
            p = (m - p) % m
    prompt = opening + " ".join(events) + " At which mark does the pointer stop?"
    lines.append(f"Stop: mark {p}.")
    return prompt, str(p), "\n".join(lines)
