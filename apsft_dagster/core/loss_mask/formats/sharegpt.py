"""ShareGPT rows (`conversations` of {"from", "value"}) to the canonical row, with LLaMA-Factory's
conventions: a `function_call` turn's value is JSON {"name", "arguments"} (or a list of them) and
becomes an assistant turn with `tool_calls`; `observation` / `tool` turns are tool results; a
top-level `system` string is kept as the canonical row's `system` and a top-level `tools` (a JSON
string or a list; bare {"name", "parameters"} specs are wrapped as OpenAI functions) as `tools`."""

from __future__ import annotations

import json

from apsft_dagster.core.loss_mask.formats.openai import check_calls, fail, project_fields, row_id

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
         "function_call": "assistant", "observation": "tool", "tool": "tool", "function": "tool"}


def _calls(value: str, where: str, field: str) -> list:
    try:
        decoded = json.loads(value)
    except ValueError as exc:
        raise fail(where, field, f"must be JSON {{'name', 'arguments'}} for a function_call turn ({exc})") from None
    calls = decoded if isinstance(decoded, list) else [decoded]
    if not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
        raise fail(where, field, "must be JSON {'name': str, 'arguments': ...} (or a list of them)")
    return check_calls([{"type": "function", "function": {"name": c["name"], "arguments": c.get("arguments", {})}}
                        for c in calls], where, field)


def _message(turn: object, where: str, field: str) -> dict:
    if not isinstance(turn, dict):
        raise fail(where, field, "must be an object {'from', 'value'}")
    speaker = turn.get("from")
    role = ROLES.get(speaker) if isinstance(speaker, str) else None
    if role is None:
        raise fail(where, f"{field}.from", f"must be one of {sorted(ROLES)}, got {speaker!r}")
    value = turn.get("value")
    if not isinstance(value, str):
        raise fail(where, f"{field}.value", f"must be a string, got {type(value).__name__}")
    if speaker == "function_call":
        out = {"role": role, "content": None, "tool_calls": _calls(value, where, f"{field}.value")}
    else:
        out = {"role": role, "content": value}
    if "step_loss_mask" in turn:
        out["step_loss_mask"] = turn["step_loss_mask"]
    return out


def _tools(row: dict, where: str) -> list | None:
    declared = row.get("tools")
    if declared is None or declared == "":
        return None
    if isinstance(declared, str):
        try:
            declared = json.loads(declared)
        except ValueError as exc:
            raise fail(where, "tools", f"must be a JSON list of function specs ({exc})") from None
    if not isinstance(declared, list):
        raise fail(where, "tools", "must be a list of function specs (or its JSON text)")
    return [{"type": "function", "function": s} if isinstance(s, dict) and "function" not in s and "name" in s else s
            for s in declared]


def canonical(row: dict, where: str, fallback: str | None) -> dict:
    turns = row.get("conversations")
    if not isinstance(turns, list):
        raise fail(where, "conversations", "must be a list of {'from', 'value'} turns")
    out = {"row_id": row_id(row, where, fallback),
           "messages": [_message(t, where, f"conversations[{i}]") for i, t in enumerate(turns)]}
    declared = _tools(row, where)
    if declared is not None:
        out["tools"] = declared
    if row.get("system") is not None:
        if not isinstance(row["system"], str):
            raise fail(where, "system", "must be a string")
        out["system"] = row["system"]
    return project_fields(row, out)
