"""OpenAI chat JSONL (fine-tuning files, vLLM / SGLang logs, most HF-exported JSONL) to the
canonical row: content-part arrays joined to their text, the legacy `function` role and
`function_call` member mapped to `tool` and `tool_calls`, `functions` to `tools`."""

from __future__ import annotations

from apsft_dagster.core.loss_mask.rules import LossMaskError

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool",
         "function": "tool"}
_KEPT = ("name", "tool_call_id", "step_loss_mask")  # message members copied as they are


def fail(where: str, field: str, problem: str) -> LossMaskError:
    return LossMaskError(f"{where}: field {field!r} {problem}; fix the row in the export")


def row_id(row: dict, where: str, fallback: str | None) -> str:
    if "row_id" in row:
        if not isinstance(row["row_id"], str):
            raise fail(where, "row_id", "must be a string")
        return row["row_id"]
    value = row.get("id")
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    if value is not None:
        raise fail(where, "id", f"must be a string or an integer, got {type(value).__name__}")
    if fallback is None:
        raise fail(where, "row_id", "is missing (and no line number was given to derive one)")
    return fallback


def project_fields(row: dict, out: dict) -> dict:
    """Copy `harness`, `verifier`, `source` (only when present) onto the canonical row."""
    for key in ("harness", "verifier", "source"):
        if key in row:
            out[key] = row[key]
    return out


def content_text(content: object, where: str, field: str) -> str | None:
    """A string or null as it is; a content-part array joined to its text parts' text."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise fail(where, field, f"must be a string, null or a list of content parts, got {type(content).__name__}")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            got = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise fail(where, f"{field}[{j}]", f"must be a text part {{'type': 'text', 'text': str}}, got {got!r}"
                       " (only text is trained here)")
        texts.append(part["text"])
    return "".join(texts)


def check_calls(calls: object, where: str, field: str) -> list:
    """Calls as given; each `function.arguments` must be a JSON string or an object."""
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise fail(where, field, "must be a list of objects")
    for j, call in enumerate(calls):
        function = call.get("function")
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(function, dict) and not isinstance(arguments, (str, dict)):
            raise fail(where, f"{field}[{j}].function.arguments",
                       f"must be a JSON string or an object, got {type(arguments).__name__}")
    return calls


def message(source: object, where: str, field: str) -> dict:
    if not isinstance(source, dict):
        raise fail(where, field, "must be an object")
    role = ROLES.get(source.get("role")) if isinstance(source.get("role"), str) else None
    if role is None:
        raise fail(where, f"{field}.role", f"must be one of {sorted(ROLES)}, got {source.get('role')!r}")
    out = {"role": role, "content": content_text(source.get("content"), where, f"{field}.content")}
    calls = source.get("tool_calls")
    if calls is None and isinstance(source.get("function_call"), dict):
        calls = [{"type": "function", "function": source["function_call"]}]
        field_calls = f"{field}.function_call"
    else:
        field_calls = f"{field}.tool_calls"
    if calls is not None:
        out["tool_calls"] = check_calls(calls, where, field_calls)
    reasoning = source.get("reasoning_content")
    if reasoning is not None:
        if not isinstance(reasoning, str):
            raise fail(where, f"{field}.reasoning_content", "must be a string or null")
        if role == "assistant":
            out["reasoning_content"] = reasoning
    for key in _KEPT:
        if key in source:
            out[key] = source[key]
    return out


def tools(row: dict, where: str) -> list | None:
    if row.get("tools") is not None:
        return row["tools"]  # the rules check the declarations and name the field
    functions = row.get("functions")
    if functions is None:
        return None
    if not isinstance(functions, list):
        raise fail(where, "functions", "must be a list of function specs")
    return [{"type": "function", "function": spec} for spec in functions]


def canonical(row: dict, where: str, fallback: str | None) -> dict:
    messages = row.get("messages")
    if not isinstance(messages, list):
        raise fail(where, "messages", "must be a list of messages")
    out = {"row_id": row_id(row, where, fallback),
           "messages": [message(m, where, f"messages[{i}]") for i, m in enumerate(messages)]}
    declared = tools(row, where)
    if declared is not None:
        out["tools"] = declared
    return project_fields(row, out)
