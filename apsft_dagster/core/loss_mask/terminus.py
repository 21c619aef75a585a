"""terminus2 action turns: one JSON object per turn, checked against the harness's action schema.

The harness executes `commands[*].keystrokes` in a terminal and stops when `task_complete` is
true, so a turn is only usable as a training target when it parses as exactly one JSON object
of that shape. Parsing is strict JSON: NaN and Infinity are not JSON and make a turn unparsed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from jsonschema import Draft202012Validator

from apsft_dagster.core.loss_mask.fast_schema import fast_validator

ACTION_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["analysis", "plan", "commands"],
    "properties": {
        "analysis": {"type": "string"},
        "plan": {"type": "string"},
        "commands": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["keystrokes"],
                "properties": {
                    "keystrokes": {"type": "string"},
                    # jsonschema's "number" excludes booleans, so `true` is rejected here
                    "duration": {"type": "number", "minimum": 0},
                },
            },
        },
        "task_complete": {"type": "boolean"},
    },
}
Draft202012Validator.check_schema(ACTION_SCHEMA)
# The action schema is fixed and judged on every terminus turn, so it is compiled to Python once,
# through the same gate as the tool schemas (fast_schema.py: only keywords where fastjsonschema
# gives Draft 2020-12's answer). tests/test_loss_mask_schema.py holds both libraries to the same cases.
_ACTION_CHECK = fast_validator(ACTION_SCHEMA)
if _ACTION_CHECK is None:
    raise RuntimeError("terminus ACTION_SCHEMA uses a keyword outside fast_schema.py's agreed subset; "
                       "widen the subset (with its differential test) or validate it with jsonschema")

# One optional ```json fence around the whole turn; the body must then be the object alone.
_JSON_FENCE = re.compile(r"\A```json[ \t]*\r?\n(?P<body>.*)\r?\n[ \t]*```\Z", re.DOTALL)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


STRICT_JSON = json.JSONDecoder(parse_constant=_reject_constant)


def parse_action(content: str | None) -> dict | None:
    """The turn's single JSON object, or None when the turn is not exactly one JSON object."""
    if content is None:
        return None
    text = content.strip()
    fenced = _JSON_FENCE.match(text)
    if fenced:
        text = fenced.group("body").strip()
    try:
        value, end = STRICT_JSON.raw_decode(text)
    except (ValueError, RecursionError):
        return None
    if text[end:].strip() or not isinstance(value, dict):
        return None  # trailing prose, a second object, or a non-object value
    return value


def is_valid_action(action: dict) -> bool:
    return _ACTION_CHECK(action)


def stalls(action: dict) -> bool:
    """A parsed turn that does nothing: no `commands` key, or no commands without finishing."""
    if "commands" not in action:
        return True
    commands = action["commands"]
    return isinstance(commands, list) and not commands and action.get("task_complete") is not True


def claims_completion(action: dict) -> bool:
    return action.get("task_complete") is True


def has_executable_command(action: dict) -> bool:
    """At least one command would type something: a non-blank string of keystrokes."""
    commands = action.get("commands")
    if not isinstance(commands, list):
        return False
    return any(
        isinstance(c, dict) and isinstance(c.get("keystrokes"), str) and c["keystrokes"].strip()
        for c in commands
    )


def is_trusted_failure(verifier: Mapping, known_broken_families: frozenset[str]) -> bool:
    """The verifier ran, on a family we trust, and said no: only then is a claim provably false."""
    reward = verifier.get("reward")
    return (
        verifier.get("passed") is False
        and isinstance(reward, (int, float))
        and not isinstance(reward, bool)
        and verifier.get("infra_exception") is False
        and verifier.get("family") not in known_broken_families
    )
