"""foundry_ledger: a batch ledger through defect scrapping, drawing yields, transfers and splits."""

from __future__ import annotations

import random

DESTS = ("mill", "forge", "harbor", "armory", "smithy", "depot", "bellworks", "mint")
CODES = ("Ash", "Brass", "Cinder", "Dross", "Ember", "Flux", "Gild", "Helm", "Iron", "Jet")


def build(rng: random.Random, level: int, steps: int) -> tuple[str, str, str]:
    q, unit = rng.randint(2, 12) * 12, "ingots"
    code = f"{rng.choice(CODES)}-{rng.randint(10, 99)}"
    opening = f"Foundry ledger for batch {code}. {q} ingots are cast. "
    events, lines = [], [f"{q} ingots are cast: {q}."]
    drawn = False
    for _ in range(steps):
        kinds = ["defect", "transfer", "receive"] + ([] if drawn else ["draw"]) + (["split"] if level >= 3 else [])
        kind = rng.choice(kinds)
        divisors = [d for d in (2, 3, 4, 5, 6, 10) if q % d == 0 and q > d]
        if kind in ("defect", "split") and not divisors:
            kind = "receive"
        if kind == "transfer" and q < 2:
            kind = "receive"
        if kind == "defect":
            d = rng.choice(divisors)
            bad = q // d
            events.append(f"1 in {d} of the {unit} is defective and scrapped.")
            lines.append(f"{events[-1][:-1]}: {q} / {d} = {bad}, {q} - {bad} = {q - bad}.")
            q -= bad
        elif kind == "split":
            k = rng.choice(divisors)
            events.append(f"The {unit} are split equally among {k} kilns and the ledger keeps one share.")
            lines.append(f"{events[-1][:-1]}: {q} / {k} = {q // k}.")
            q //= k
        elif kind == "draw":
            y = rng.randint(2, 5)
            events.append(f"Each good ingot is drawn into {y} rods.")
            lines.append(f"{events[-1][:-1]}: {q} x {y} = {q * y}.")
            q, unit, drawn = q * y, "rods", True
        elif kind == "transfer":
            t = rng.randint(1, q - 1)
            events.append(f"{t} {unit} are transferred to the {rng.choice(DESTS)}.")
            lines.append(f"{events[-1][:-1]}: {q} - {t} = {q - t}.")
            q -= t
        else:
            r = rng.randint(1, 30)
            events.append(f"The {rng.choice(DESTS)} returns {r} {unit}.")
            lines.append(f"{events[-1][:-1]}: {q} + {r} = {q + r}.")
            q += r
    c = rng.randint(4, 9)
    prompt = (opening + " ".join(events) + f" At the end the ledger packs the {unit} into crates of {c}."
              f" How many {unit} are left over?")
    lines.append(f"Ledger: {q} {unit} = {q // c} crates of {c} + {q % c} left over.")
    return prompt, str(q % c), "\n".join(lines)
