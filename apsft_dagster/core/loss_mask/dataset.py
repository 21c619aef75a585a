"""A synthetic agentic SFT dataset with planted defects, so every loss-mask rule has a known truth.

Each row is built from message templates whose reasons are known by construction: every
defect class and every left-alone case, in all three harnesses, at rates drawn from a seeded
RNG. `planted_rows(n, seed)` yields (row, truth) where truth holds, per assistant message index,
the reasons the rules must flag and the left-alone label they must count. The same (n, seed)
always gives the same rows, so a file written from them is byte-identical across runs.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

HARNESSES = ("terminus2", "mini_swe", "tool_calling")
SOURCES = {"terminus2": ("terminus2", "terminus2_hard"), "mini_swe": ("mini_swe",),
           "tool_calling": ("api_bank", "toolace")}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"], "additionalProperties": False}}}]


@dataclass
class Truth:
    """Per assistant message index: the reasons to flag, and the left-alone label to count."""

    flags: dict[int, frozenset[str]] = field(default_factory=dict)
    left_alone: dict[int, str] = field(default_factory=dict)


def _action(commands: list | None, *, complete: bool | None = None, drop: str | None = None) -> dict:
    action = {"analysis": "The listing shows the config file.", "plan": "Inspect it, then run the tests."}
    if commands is not None:
        action["commands"] = commands
    if complete is not None:
        action["task_complete"] = complete
    action.pop(drop, None)
    return action


RUN = [{"keystrokes": "ls -la\n", "duration": 0.1}]

# terminus2 turns before the last: (content, reasons)
TERMINUS_TURNS = [
    (json.dumps(_action(RUN)), frozenset()),
    ("```json\n" + json.dumps(_action(RUN, complete=False)) + "\n```", frozenset()),
    (json.dumps(_action(RUN)) + "\nI will now run it.", frozenset({"terminus-json"})),  # trailing prose
    (json.dumps(_action(RUN, drop="plan")), frozenset({"terminus-json"})),  # schema: plan is required
    (json.dumps(_action([{"keystrokes": 5}])), frozenset({"terminus-json"})),  # keystrokes not a string
    (json.dumps(_action([{"keystrokes": "ls\n", "duration": -1}])), frozenset({"terminus-json"})),
    (json.dumps(_action([])), frozenset({"stall"})),  # nothing to do and not complete
    (json.dumps(_action(None)), frozenset({"terminus-json", "stall"})),  # no commands key at all
]
MINI_SWE_TURNS = [
    ("Let me look at the tests.\n\n```bash\npytest -q tests/\n```", frozenset(), None),
    ("I will list the files.\n$ ls -la src/", frozenset({"prose-command"}), None),
    ("Now search with `grep -rn TODO src` to find the gaps.", frozenset({"prose-command"}), None),
    ("The `config` module holds the settings; the fix is complete.", frozenset(), "prose_only"),
]


def planted_rows(n: int, seed: int) -> Iterator[tuple[dict, Truth]]:
    rng = random.Random(seed)
    for i in range(n):
        harness = HARNESSES[rng.randrange(len(HARNESSES))]
        row, truth = {"terminus2": _terminus, "mini_swe": _mini_swe, "tool_calling": _tool_calling}[harness](rng)
        row = {"row_id": f"row-{i:07d}", "source": rng.choice(SOURCES[harness]), "harness": harness, **row}
        yield row, truth


OPENING = ({"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix the bug."})


def _conversation(turns: list[tuple[dict, frozenset[str], str | None]], observe: Callable[[dict], dict],
                  opening: tuple[dict, ...] = OPENING) -> tuple[list, Truth]:
    """The opening messages, then the assistant turns (message, reasons, left-alone label), each
    but the last answered by `observe(message)`; the truth is indexed by position in the result."""
    messages, truth = [dict(m) for m in opening], Truth()
    for k, (message, reasons, alone) in enumerate(turns):
        index = len(messages)
        messages.append({"role": "assistant", **message})
        if reasons:
            truth.flags[index] = reasons
        if alone:
            truth.left_alone[index] = alone
        if k < len(turns) - 1:
            messages.append(observe(message))
    return messages, truth


def _observation(rng: random.Random) -> Callable[[dict], dict]:
    """The environment's short answer: a tool result after a call, else the user."""
    return lambda message: {"role": "tool" if message.get("tool_calls") else "user",
                            "content": f"Observation {rng.randrange(1000)}"}


def _verifier(rng: random.Random, trusted_failure: bool) -> dict:
    if trusted_failure:
        return {"passed": False, "reward": 0.0, "infra_exception": False, "family": "build"}
    return rng.choice([{"passed": True, "reward": 1.0, "infra_exception": False, "family": "build"},
                       {"passed": False, "reward": False, "infra_exception": False, "family": "build"},  # bool reward
                       {"passed": False, "reward": 0.0, "infra_exception": True, "family": "build"},
                       {"passed": None, "reward": None, "infra_exception": False, "family": "build"}])


def _terminus(rng: random.Random) -> tuple[dict, Truth]:
    turns = [({"content": c}, r, None) for c, r in rng.sample(TERMINUS_TURNS, rng.randint(1, 3))]
    trusted = rng.random() < 0.5
    ending = rng.choice(["claim", "claim_with_command", "done"])
    if ending == "claim":  # task_complete with nothing executable
        last = json.dumps(_action([{"keystrokes": "   "}], complete=True))
        turns.append(({"content": last}, frozenset({"false-claim"}) if trusted else frozenset(),
                      None))
    elif ending == "claim_with_command":
        last = json.dumps(_action([{"keystrokes": "echo done\n"}], complete=True))
        turns.append(({"content": last}, frozenset(), "false_claim_with_command" if trusted else None))
    else:
        turns.append(({"content": json.dumps(_action(RUN))}, frozenset(), None))
    messages, truth = _conversation(turns, _observation(rng))
    return {"messages": messages, "verifier": _verifier(rng, trusted)}, truth


def _mini_swe(rng: random.Random) -> tuple[dict, Truth]:
    turns = [({"content": c}, r, a) for c, r, a in rng.sample(MINI_SWE_TURNS, rng.randint(1, 4))]
    if rng.random() < 0.2:
        turns.append(({"content": "  \n "}, frozenset({"stall"}), None))  # whitespace, no tool calls
    messages, truth = _conversation(turns, _observation(rng))
    return {"messages": messages, "verifier": _verifier(rng, False)}, truth


def _call(name: str, arguments: str) -> dict:
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}


TOOL_TURNS = [
    ({"content": None, "tool_calls": [_call("get_weather", '{"city": "Oslo", "days": 2}')]}, frozenset()),
    ({"content": "", "tool_calls": [_call("get_weather", '{"city": "Oslo"')]}, frozenset({"toolcall-syntax"})),
    ({"content": None, "tool_calls": [_call("get_weather", '["Oslo"]')]}, frozenset({"toolcall-syntax"})),
    ({"content": None, "tool_calls": [_call("get_forecast", '{"city": "Oslo"}')]}, frozenset({"toolcall-syntax"})),
    ({"content": None, "tool_calls": [_call("get_weather", '{"city": "Oslo", "days": 0}')]},
     frozenset({"toolcall-syntax"})),  # fails the parameters schema (minimum 1)
    ({"content": "It will be sunny in Oslo."}, frozenset()),
    ({"content": "   "}, frozenset({"stall"})),
]


def _tool_calling(rng: random.Random) -> tuple[dict, Truth]:
    turns = [(m, r, None) for m, r in rng.sample(TOOL_TURNS, rng.randint(1, 3))]
    messages, truth = _conversation(turns, _observation(rng))
    return {"messages": messages, "tools": TOOLS, "verifier": _verifier(rng, False)}, truth


def dataset_lines(n: int, seed: int) -> Iterator[bytes]:
    """The planted rows as JSON lines (compact separators, so a line is what a build writes back)."""
    for row, _ in planted_rows(n, seed):
        yield json.dumps(row, ensure_ascii=False).encode() + b"\n"
