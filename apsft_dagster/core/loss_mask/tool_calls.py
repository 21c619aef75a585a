"""toolcall-syntax: every call must name a declared function with JSON-object arguments that
satisfy that function's `parameters` schema, as an OpenAI-style runtime would require. Arguments
may be given as the JSON text of an object (OpenAI) or as the object itself (Hugging Face).

The declared tools belong to the row (written by the data producer), so a broken declaration is
a malformed row and raises; what sits inside a call was written by the model and is only flagged.
"""

from __future__ import annotations

import functools
import json
import marshal
from collections.abc import Callable

from jsonschema import Draft202012Validator, SchemaError, validators

from apsft_dagster.core.loss_mask.fast_schema import fast_validator
from apsft_dagster.core.loss_mask.terminus import STRICT_JSON

# OpenAI treats a function without `parameters` as one that takes an empty object.
_NO_PARAMETERS: dict = {"type": "object"}
# The cache key of a schema: json.dumps(..., sort_keys=True) without building an encoder per call.
_CANONICAL = json.JSONEncoder(sort_keys=True)

IsValid = Callable[[object], bool]
_SEEN: dict[bytes, dict[str, IsValid]] = {}
_SEEN_MAX = 4096


def tool_validators(tools: object, fail: Callable[[str, str], Exception]) -> dict[str, IsValid]:
    """Function name -> `is_valid` of its arguments (shared between rows: read it, never change it);
    `fail(field, problem)` builds the row error.

    Rows repeat a few tool lists, so a list already seen reuses its validators. The key is the
    list's marshal bytes: marshal takes only exact built-in types and writes each value's type,
    order and content, so two lists with one key are the same structure and get the same answer
    (a dict subclass or other object is refused by marshal and simply not cached). Errors are not
    cached: a broken list raises, naming its row, every time."""
    try:
        key = marshal.dumps(tools)
    except ValueError:
        return _validators(tools, fail)
    by_name = _SEEN.get(key)
    if by_name is None:
        by_name = _validators(tools, fail)
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()
        _SEEN[key] = by_name
    return by_name


def _validators(tools: object, fail: Callable[[str, str], Exception]) -> dict[str, IsValid]:
    if not isinstance(tools, list):
        raise fail("tools", "must be a list of function specs")
    by_name: dict[str, IsValid] = {}
    for i, spec in enumerate(tools):
        function = spec.get("function") if isinstance(spec, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise fail(f"tools[{i}].function.name", "must be a non-empty string")
        if name in by_name:
            raise fail(f"tools[{i}].function.name", f"declares {name!r} twice")
        try:
            by_name[name] = _compiled(_CANONICAL.encode(function.get("parameters", _NO_PARAMETERS)))
        except SchemaError as err:
            raise fail(f"tools[{i}].function.parameters", f"is not a valid JSON Schema: {err.message}")
        except TypeError as err:  # not JSON-representable, so not a schema either
            raise fail(f"tools[{i}].function.parameters", f"is not a valid JSON Schema: {err}")
    return by_name


@functools.lru_cache(maxsize=4096)
def _compiled(schema_json: str) -> IsValid:
    """A checked validator per distinct schema: a dataset repeats a few tool sets over many rows,
    and checking a schema costs far more than validating one call against it. A 2020-12 schema
    inside fastjsonschema's agreed subset is compiled to Python; any other stays with jsonschema."""
    schema = json.loads(schema_json)
    # Honour a declared "$schema"; default to Draft 2020-12 like the action schema.
    cls = validators.validator_for(schema, default=Draft202012Validator)
    cls.check_schema(schema)
    fast = fast_validator(schema) if cls is Draft202012Validator else None
    return fast or cls(schema).is_valid


def call_is_valid(call: dict, by_name: dict[str, IsValid]) -> bool:
    function = call.get("function")
    if not isinstance(function, dict):
        return False
    name, arguments = function.get("name"), function.get("arguments")
    if not isinstance(name, str) or name not in by_name:
        return False
    if isinstance(arguments, dict):  # an object (the Hugging Face convention) is judged as the object it is
        return by_name[name](arguments)
    if not isinstance(arguments, str):
        return False
    try:
        decoded = STRICT_JSON.decode(arguments)
    except (ValueError, RecursionError):
        return False
    return isinstance(decoded, dict) and by_name[name](decoded)


def has_bad_call(tool_calls: list[dict], by_name: dict[str, IsValid]) -> bool:
    return not all(call_is_valid(call, by_name) for call in tool_calls)
