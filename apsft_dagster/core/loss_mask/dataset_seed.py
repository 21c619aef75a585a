"""The benchmark's scale mode: planted rows shaped like the seed's export, not like the smoke file.

The seed's v0.7 export holds 742,665 rows in 34.5 GB (46.5 KB a row, about 12,100 tokens of
which 38% are assistant targets) and its rules touch 4.5% of the rows. The smoke file is the
opposite on purpose (800-byte rows, nearly every row defective) so that tests see every class
often; a throughput measured on it is a measure of per-row overhead, not of what a real export
costs. This shape keeps the smoke file's planted templates (so its truth is known the same way)
and wraps them in trajectories of the seed's size: a long system prompt, terminal screens,
file listings and tool results between the turns, clean assistant turns of realistic length,
and a defective row at `defect_rate` (4.5% by default).

Text comes from slices of one seeded pool of words and terminal lines, so a gigabyte is written
in seconds and every row is still different; clean turns are built so no rule can fire on them
(terminus actions that validate, mini-swe turns that carry a ```bash block, tool calls whose
arguments satisfy their schemas), which `tests/test_loss_mask_dataset.py` checks against the rules.
"""

from __future__ import annotations

import json
import random

from apsft_dagster.core.loss_mask import dataset as dense

SEED_DEFECT_RATE = 0.045  # the seed: 33,291 of 742,665 rows carry a masked turn
_WORDS = ("the a to of and in is it for on with as file test error value line return def class self import "
          "from config path build module fixed check output input none true false data list dict string "
          "line number found missing expected got raise assert print status ok failed passed run step").split()
_TERM = ('drwxr-xr-x', '-rw-r--r--', 'root', '4096', 'Nov', '30', 'src/', 'tests/', '"utf-8"', 'Traceback',
         '(most', 'recent', 'call', 'last):', 'File', 'line', '42,', 'in', '<module>', 'E', 'AssertionError',
         '\\n', '\t', '==', '===', 'PASSED', 'FAILED', '[100%]', 'root@box:/app#', '$', 'python3', '-m', 'pytest')


class _Pool:
    """One seeded pool of prose and one of terminal text; a span is a slice at a random offset."""

    def __init__(self, rng: random.Random, size: int = 1 << 20):
        self.rng = rng
        self.prose = self._text(_WORDS, size, 14)
        self.terminal = self._text(_TERM + tuple(_WORDS), size, 9)

    def _text(self, vocabulary: tuple | list, size: int, per_line: int) -> str:
        words, total, rng = [], 0, self.rng
        while total < size:
            line = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(per_line // 2, per_line * 2)))
            words.append(line)
            total += len(line) + 1
        return "\n".join(words)

    def span(self, text: str, low: int, high: int) -> str:
        n = self.rng.randint(low, high)
        start = self.rng.randrange(len(text) - n)
        return text[start:start + n]


def seed_shaped_rows(n: int, seed: int, *, defect_rate: float = SEED_DEFECT_RATE):
    """(row, Truth) pairs like dataset.planted_rows, at the seed's row size and defect rate."""
    rng = random.Random(seed)
    pool = _Pool(random.Random(seed + 1))
    system = pool.span(pool.prose, 4500, 6500)
    for i in range(n):
        harness = rng.choices(dense.HARNESSES, weights=(6, 2, 2))[0]
        defective = rng.random() < defect_rate
        row, truth = {"terminus2": _terminus, "mini_swe": _mini_swe, "tool_calling": _tool_calling}[harness](
            rng, pool, defective)
        task = pool.span(pool.prose, 300, 2000)
        row["messages"] = [{"role": "system", "content": system}, {"role": "user", "content": task}] + row["messages"]
        truth.flags = {k + 2: v for k, v in truth.flags.items()}
        truth.left_alone = {k + 2: v for k, v in truth.left_alone.items()}
        yield {"row_id": f"row-{i:07d}", "source": rng.choice(dense.SOURCES[harness]), "harness": harness, **row}, truth


def _screen(pool: _Pool, heading: str = ""):
    """The environment's answer to a turn: a user message holding a terminal screen."""
    return lambda _: {"role": "user", "content": heading + pool.span(pool.terminal, 1200, 6000)}


def _plant(rng: random.Random, clean: list, defects: list) -> list:
    """Replace one or two clean turns (never the last: endings are planted separately) by defects."""
    for k in rng.sample(range(len(clean) - 1), rng.randint(1, 2)):
        clean[k] = rng.choice(defects)
    return clean


def _action_turn(rng: random.Random, pool: _Pool, complete: bool | None = None) -> tuple[dict, frozenset, None]:
    commands = [{"keystrokes": "cd /app && " + pool.span(pool.terminal, 8, 120) + "\n",
                 "duration": rng.choice((0.1, 1.0, 5.0))} for _ in range(rng.randint(1, 3))]
    action = {"analysis": pool.span(pool.prose, 600, 3800), "plan": pool.span(pool.prose, 150, 900),
              "commands": commands}
    if complete is not None:
        action["task_complete"] = complete
    return {"content": json.dumps(action)}, frozenset(), None


def _terminus(rng: random.Random, pool: _Pool, defective: bool) -> tuple[dict, dense.Truth]:
    turns = [_action_turn(rng, pool) for _ in range(rng.randint(3, 11))]
    trusted = rng.random() < 0.3  # the verifier is a trusted failure (only a final claim reads it)
    if defective and rng.random() < 0.15:  # a false final claim: task_complete with nothing to run
        trusted = True
        turns[-1] = ({"content": json.dumps(dense._action([{"keystrokes": " "}], complete=True))},
                     frozenset({"false-claim"}), None)
    elif defective:
        _plant(rng, turns, [({"content": c}, r, None) for c, r in dense.TERMINUS_TURNS if r])
    elif trusted and rng.random() < 0.01:  # the claim the rules leave alone: it carries a command
        turns[-1] = (_action_turn(rng, pool, complete=True)[0], frozenset(), "false_claim_with_command")
    messages, truth = dense._conversation(turns, _screen(pool, "New Terminal Output:\n\n"), opening=())
    return {"messages": messages, "verifier": dense._verifier(rng, trusted)}, truth


def _mini_swe_turn(rng: random.Random, pool: _Pool) -> tuple[dict, frozenset, None]:
    text = pool.span(pool.prose, 500, 3600)
    return {"content": f"THOUGHT: {text}\n\n```bash\n{pool.span(pool.prose, 10, 80)}\n```"}, frozenset(), None


def _mini_swe(rng: random.Random, pool: _Pool, defective: bool) -> tuple[dict, dense.Truth]:
    turns = [_mini_swe_turn(rng, pool) for _ in range(rng.randint(3, 11))]
    if defective:
        defects = [({"content": c}, r, a) for c, r, a in dense.MINI_SWE_TURNS if r] + [
            ({"content": "  \n "}, frozenset({"stall"}), None)]
        _plant(rng, turns, defects)
    if rng.random() < 0.3:  # an end-of-run summary with no command text: left alone
        turns.append(({"content": pool.span(pool.prose, 200, 1200)}, frozenset(), "prose_only"))
    messages, truth = dense._conversation(turns, _screen(pool), opening=())
    return {"messages": messages, "verifier": dense._verifier(rng, False)}, truth


def _tool_turn(rng: random.Random, pool: _Pool) -> tuple[dict, frozenset, None]:
    arguments = json.dumps({"city": pool.span(pool.prose, 3, 30), "days": rng.randint(1, 14)})
    return {"content": pool.span(pool.prose, 0, 600) or None, "tool_calls": [dense._call("get_weather", arguments)]}, \
        frozenset(), None


def _tool_calling(rng: random.Random, pool: _Pool, defective: bool) -> tuple[dict, dense.Truth]:
    turns = [_tool_turn(rng, pool) for _ in range(rng.randint(3, 11))]
    turns.append(({"content": pool.span(pool.prose, 200, 1500)}, frozenset(), None))  # the answer
    if defective:
        _plant(rng, turns, [(m, r, None) for m, r in dense.TOOL_TURNS if r])

    def observe(message: dict) -> dict:
        if message.get("tool_calls"):
            return {"role": "tool", "content": json.dumps({"result": pool.span(pool.terminal, 1200, 6000)})}
        return {"role": "user", "content": pool.span(pool.prose, 50, 400)}
    messages, truth = dense._conversation(turns, observe, opening=())
    return {"messages": messages, "tools": dense.TOOLS, "verifier": dense._verifier(rng, False)}, truth
