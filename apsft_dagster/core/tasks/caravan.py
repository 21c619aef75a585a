"""caravan: two goods tracked over stops with sales, purchases, trades and storm losses."""

from __future__ import annotations

import random

GOODS = ("salt", "silk", "spice", "tea", "wool", "amber", "copper", "dates", "figs", "glass")
TOWNS = ("Tarnu", "Oskel", "Vireth", "Marrow", "Quell", "Dunmere", "Ashfen", "Korrin", "Lyss",
         "Pellar", "Sunvale", "Brakk", "Ithren", "Gorse", "Halwen", "Nemby")


def build(rng: random.Random, level: int, steps: int) -> tuple[str, str, str]:
    g1, g2 = rng.sample(GOODS, 2)
    top = 3 + 3 * level  # quantities grow with the level
    stock = {g1: rng.randint(2, top), g2: rng.randint(1, top)}
    towns = rng.sample(TOWNS, steps + 1)
    start = f"{stock[g1]} {g1} and {stock[g2]} {g2}"
    events, lines = [], [f"carrying {start}: {g1} {stock[g1]}, {g2} {stock[g2]}."]
    kinds = ["sell", "buy"] + (["trade"] if level >= 2 else []) + (["storm"] if level >= 3 else [])
    for town in towns[1:]:
        kind = rng.choice(kinds)
        good = rng.choice((g1, g2))
        other = g2 if good == g1 else g1
        if kind == "storm" and stock[good] % 2 == 0 and stock[good] > 0:
            half = stock[good] // 2
            events.append(f"At {town} a storm ruins half of the {good}.")
            lines.append(f"{events[-1][:-1]}: {good} {stock[good]} / 2 = {half}.")
            stock[good] = half
        elif kind == "trade" and stock[good] >= 2:
            k, m = rng.randint(1, stock[good]), rng.randint(1, top // 2)
            events.append(f"At {town} it trades {k} {good} for {m} {other}.")
            lines.append(f"{events[-1][:-1]}: {good} {stock[good]} - {k} = {stock[good] - k}, "
                         f"{other} {stock[other]} + {m} = {stock[other] + m}.")
            stock[good] -= k
            stock[other] += m
        elif kind == "sell" and stock[good] >= 1:
            k = rng.randint(1, stock[good])
            events.append(f"At {town} it sells {k} {good}.")
            lines.append(f"{events[-1][:-1]}: {good} {stock[good]} - {k} = {stock[good] - k}.")
            stock[good] -= k
        else:
            k = rng.randint(1, top // 2)
            events.append(f"At {town} it buys {k} {good}.")
            lines.append(f"{events[-1][:-1]}: {good} {stock[good]} + {k} = {stock[good] + k}.")
            stock[good] += k
    target = rng.choice((g1, g2))
    prompt = (f"A caravan leaves {towns[0]} carrying {start}. " + " ".join(events)
              + f" How many {target} does the caravan carry at the end?")
    lines.append(f"End: {target} {stock[target]}.")
    return prompt, str(stock[target]), "\n".join(lines)

