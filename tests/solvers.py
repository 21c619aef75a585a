"""Independent solvers: each reads a task's prompt text and computes the answer from scratch.

They share no code with the generators; they are what the canonical answers are checked against.
"""

from __future__ import annotations

import math
import re


def solve_caravan(prompt: str) -> str:
    m = re.match(r"A caravan leaves \w+ carrying (\d+) (\w+) and (\d+) (\w+)\. ", prompt)
    stock = {m[2]: int(m[1]), m[4]: int(m[3])}
    for sentence in re.findall(r"At \w+ ([^.]*)\.", prompt):
        if t := re.fullmatch(r"it sells (\d+) (\w+)", sentence):
            stock[t[2]] -= int(t[1])
        elif t := re.fullmatch(r"it buys (\d+) (\w+)", sentence):
            stock[t[2]] += int(t[1])
        elif t := re.fullmatch(r"it trades (\d+) (\w+) for (\d+) (\w+)", sentence):
            stock[t[2]] -= int(t[1])
            stock[t[4]] += int(t[3])
        elif t := re.fullmatch(r"a storm ruins half of the (\w+)", sentence):
            stock[t[1]] //= 2
        else:
            raise AssertionError(f"unparsed caravan event: {sentence!r}")
    target = re.search(r"How many (\w+) does the caravan carry", prompt)[1]
    return str(stock[target])


def solve_foundry(prompt: str) -> str:
    q = int(re.search(r"(\d+) ingots are cast\.", prompt)[1])
    body = prompt.split("are cast. ", 1)[1].rsplit(" At the end", 1)[0]
    for sentence in re.findall(r"[^.]+\.", body):
        s = sentence.strip()
        if t := re.fullmatch(r"1 in (\d+) of the \w+ is defective and scrapped\.", s):
            q -= q // int(t[1])
        elif t := re.fullmatch(r"Each good ingot is drawn into (\d+) rods\.", s):
            q *= int(t[1])
        elif t := re.fullmatch(r"(\d+) \w+ are transferred to the \w+\.", s):
            q -= int(t[1])
        elif t := re.fullmatch(r"The \w+ returns (\d+) \w+\.", s):
            q += int(t[1])
        elif t := re.fullmatch(r"The \w+ are split equally among (\d+) kilns and the ledger keeps one share\.", s):
            q //= int(t[1])
        else:
            raise AssertionError(f"unparsed ledger line: {s!r}")
    crate = int(re.search(r"into crates of (\d+)\.", prompt)[1])
    return str(q % crate)


def solve_runeward(prompt: str) -> str:
    word = re.match(r"Runeword: (\w+)\.", prompt)[1]
    for lhs, rhs in re.findall(r"^\d+\. (\w+) -> (\w+)$", prompt, flags=re.M):
        word = word.replace(lhs, rhs, 1)  # str.replace with count 1 = leftmost occurrence
    rune = re.search(r"How many (\w) runes", prompt)[1]
    return str(word.count(rune))


def solve_brinework(prompt: str) -> str:
    m = re.match(r"A brine vat holds (\d+) kg of salt dissolved in (\d+) kg of water\. ", prompt)
    salt, water = int(m[1]), int(m[2])
    body = prompt[m.end():].rsplit(" What is the ratio", 1)[0]
    for sentence in re.findall(r"[^.]+\.", body):
        s = sentence.strip()
        if t := re.fullmatch(r"(\d+) kg of water is added\.", s):
            water += int(t[1])
        elif t := re.fullmatch(r"(\d+) kg of water evaporates\.", s):
            water -= int(t[1])
        elif t := re.fullmatch(r"(\d+) kg of salt is stirred in\.", s):
            salt += int(t[1])
        elif t := re.fullmatch(r"A second vat with (\d+) kg of salt in (\d+) kg of water is poured in\.", s):
            salt, water = salt + int(t[1]), water + int(t[2])
        elif s == "Half of the brine is drained away.":
            salt, water = salt // 2, water // 2
        else:
            raise AssertionError(f"unparsed brine line: {s!r}")
    g = math.gcd(salt, water)
    return f"{salt // g}:{water // g}"


def solve_spindle(prompt: str) -> str:
    m = re.match(r"A spindle dial has (\d+) marks numbered 0 to \d+\. The pointer starts at mark (\d+)\. ", prompt)
    marks, p = int(m[1]), int(m[2])
    for sentence in re.findall(r"It ([^.]*(?:\(\d+ - k\) mod \d+)?[^.]*)\.", prompt):
        if t := re.fullmatch(r"turns forward (\d+) marks, (\d+) times in a row", sentence):
            p += int(t[1]) * int(t[2])
        elif t := re.fullmatch(r"turns forward (\d+) marks", sentence):
            p += int(t[1])
        elif t := re.fullmatch(r"turns back (\d+) marks", sentence):
            p -= int(t[1])
        elif sentence == "jumps to the opposite mark":
            p += marks // 2
        elif sentence.startswith("is mirrored"):
            p = -p
        else:
            raise AssertionError(f"unparsed spindle turn: {sentence!r}")
        p %= marks
    return str(p)


SOLVERS = {"caravan": solve_caravan, "foundry_ledger": solve_foundry, "runeward": solve_runeward,
           "brinework": solve_brinework, "spindle": solve_spindle}
