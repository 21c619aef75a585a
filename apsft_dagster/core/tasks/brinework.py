"""brinework (held family): salt and water through dilution, evaporation, mixing and draining."""

from __future__ import annotations

import math
import random


def build(rng: random.Random, level: int, steps: int) -> tuple[str, str, str]:
    salt, water = rng.randint(1, 12) * 2, rng.randint(5, 30) * 2
    opening = f"A brine vat holds {salt} kg of salt dissolved in {water} kg of water. "
    events, lines = [], [f"holds {salt} kg of salt dissolved in {water} kg of water: salt {salt}, water {water}."]
    for _ in range(steps):
        kind = rng.choice(["dilute", "evaporate", "salt", "mix"] + (["drain"] if level >= 2 else []))
        if kind == "drain" and (salt % 2 or water % 2):
            kind = "dilute"
        if kind == "evaporate" and water < 2:
            kind = "dilute"
        if kind == "dilute":
            x = rng.randint(1, 20)
            events.append(f"{x} kg of water is added.")
            lines.append(f"{events[-1][:-1]}: {water} + {x} = {water + x}.")
            water += x
        elif kind == "evaporate":
            e = rng.randint(1, water - 1)
            events.append(f"{e} kg of water evaporates.")
            lines.append(f"{events[-1][:-1]}: {water} - {e} = {water - e}.")
            water -= e
        elif kind == "salt":
            x = rng.randint(1, 9)
            events.append(f"{x} kg of salt is stirred in.")
            lines.append(f"{events[-1][:-1]}: {salt} + {x} = {salt + x}.")
            salt += x
        elif kind == "mix":
            s2, w2 = rng.randint(1, 9), rng.randint(2, 20)
            events.append(f"A second vat with {s2} kg of salt in {w2} kg of water is poured in.")
            lines.append(f"{events[-1][:-1]}: salt {salt} + {s2} = {salt + s2}, water {water} + {w2} = {water + w2}.")
            salt, water = salt + s2, water + w2
        else:
            events.append("Half of the brine is drained away.")
            lines.append(f"{events[-1][:-1]}: salt {salt} / 2 = {salt // 2}, water {water} / 2 = {water // 2}.")
            salt, water = salt // 2, water // 2
    g = math.gcd(salt, water)
    prompt = (opening + " ".join(events)
              + " What is the ratio of salt to water at the end, in lowest terms (salt:water)?")
    lines.append(f"Ratio: {salt}:{water}, divide by {g}: {salt // g}:{water // g}.")
    return prompt, f"{salt // g}:{water // g}", "\n".join(lines)
