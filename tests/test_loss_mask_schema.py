"""Compiled checks agree with jsonschema: the terminus action schema and the tool-parameter schemas
fastjsonschema is allowed to compile (every other schema stays with jsonschema)."""

import itertools
import json

import pytest
from jsonschema import Draft7Validator, Draft202012Validator

from apsft_dagster.core.loss_mask.fast_schema import fast_validator
from apsft_dagster.core.loss_mask.rules import LossMaskError
from apsft_dagster.core.loss_mask.terminus import ACTION_SCHEMA, is_valid_action
from apsft_dagster.core.loss_mask.tool_calls import tool_validators

VALUES = [None, True, False, 0, -1, 1.5, "", "ls\n", [], [{}], {"x": 1}]


def test_compiled_and_reference_validators_agree_on_every_variant():
    reference = Draft202012Validator(ACTION_SCHEMA)
    checked = disagreements = 0
    commands = [[], [{"keystrokes": k, "duration": d} for k, d in [("ls", 0.5)]]]
    commands += [[{"keystrokes": k}] for k in VALUES] + [[{"keystrokes": "ls", "duration": d}] for d in VALUES]
    commands += [[{"duration": 1}], "ls", None, [["ls"]]]
    for analysis, plan, cmds, complete in itertools.product(VALUES[:8], ["p", 3, None], commands,
                                                             ["absent", True, False, 1, None]):
        action = {"analysis": analysis, "plan": plan, "commands": cmds, "extra": 1}
        if plan is None:
            del action["plan"]
        if complete != "absent":
            action["task_complete"] = complete
        checked += 1
        disagreements += is_valid_action(action) != reference.is_valid(action)
    assert checked > 2000 and disagreements == 0


# Tool-parameter schemas: fastjsonschema only where it gives Draft 2020-12's answer (fast_schema.py).
INSTANCES = [None, True, False, 0, 1, -1, 2, 3, 1.0, 1.5, -0.5, 0.0, 10**20, 1e308, "", "a", "ab", "abcdef", 'q"\\',
             "ünï", "a\n", [], [1], [1, 2, 3], ["a", "b"], [True], [None, "a"], [1.0, 2.5], {}, {"a": 1},
             {"city": "Oslo"}, {"city": "Oslo", "days": 2}, {"city": "Oslo", "days": 0}, {"city": 3},
             {"city": "Oslo", "extra": True}, {"days": 1.0}, {"days": True}, {"city": "a", "days": 2.5},
             {"city": "Oslo", "tags": ["x", 1]}, {"city": "Oslo", "nested": {"k": "v"}}, {"nested": {"k": 1}}]
TYPES = ["object", "array", "string", "number", "integer", "boolean", "null",
         ["string", "null"], ["integer", "boolean"], ["number", "integer"], ["boolean", "number"], ["array", "object"]]
AGREED = [
    *({"type": t} for t in TYPES),
    *({"type": t, bound: v} for t in ("number", "integer") for bound in
      ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") for v in (0, 1, 1.5, -1)),
    {"type": "string", "minLength": 2}, {"type": "string", "maxLength": 1}, {"minLength": 1, "maxLength": 2},
    {"type": "array", "minItems": 1, "maxItems": 2}, {"minProperties": 1}, {"maxProperties": 1},
    {"enum": ["a", "ab", 'q"\\', "ünï"]}, {"type": "string", "enum": ["Oslo"]}, {"enum": []},
    {"type": "array", "items": {"type": "integer", "minimum": 1}}, {"items": {"type": ["string", "null"]}},
    {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}},
    {"type": "object", "properties": {"city": {"type": "string", "description": "d", "default": "x"},
                                      "days": {"type": "integer", "minimum": 1}},
     "required": ["city"], "additionalProperties": False, "title": "t", "$comment": "c"},
    {"properties": {"nested": {"type": "object", "properties": {"k": {"enum": ["v"]}}, "required": ["k"]}},
     "additionalProperties": {"type": "string"}},
    {"type": "object", "additionalProperties": True,
     "properties": {"tags": {"type": "array", "items": {"type": "string"}}}},
    {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "required": ["city"]},
]
OUTSIDE = [
    {"type": "string", "pattern": "^a$"},  # fastjsonschema rewrites `$`: "a\n" would differ
    {"type": "string", "format": "email"}, {"minimum": 1}, {"type": ["number", "boolean"], "minimum": 1},
    {"enum": [1, "a"]}, {"const": "a"}, {"const": True}, {"$defs": {"a": {"type": "string"}}, "$ref": "#/$defs/a"},
    {"prefixItems": [{"type": "string"}]}, {"type": "object", "properties": {"a-b": {"type": "string"}}},
    {"required": ["a b"]}, {"anyOf": [{"type": "string"}]}, {"not": {"type": "string"}},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
    {"type": "number", "minimum": float("nan")}, {"items": True}, {"uniqueItems": True},
    {"properties": {"a": {"type": "string", "pattern": "x"}}},
]


@pytest.mark.parametrize("schema", AGREED, ids=range(len(AGREED)))
def test_compiled_tool_schemas_agree_with_draft_2020_12_on_every_instance(schema):
    reference = Draft202012Validator(schema)
    fast = fast_validator(schema)
    assert fast is not None
    assert [fast(v) for v in INSTANCES] == [reference.is_valid(v) for v in INSTANCES]


@pytest.mark.parametrize("schema", OUTSIDE, ids=range(len(OUTSIDE)))
def test_schemas_outside_the_agreed_subset_stay_with_jsonschema(schema):
    assert fast_validator(schema) is None


def _fail(field, problem):
    return LossMaskError(f"{field} {problem}")


def test_tool_validators_give_jsonschemas_answer_compiled_or_not():
    for schema in [*AGREED, *OUTSIDE]:
        if schema.get("$schema", "").startswith("http://json-schema.org/draft-07"):
            reference = Draft7Validator(schema)
        else:
            reference = Draft202012Validator(schema)
        is_valid = tool_validators([{"function": {"name": "f", "parameters": schema}}], _fail)["f"]
        assert [is_valid(v) for v in INSTANCES] == [reference.is_valid(v) for v in INSTANCES], schema


class _Spec(dict):
    """A dict subclass: marshal refuses it, so its tool list is judged without the cache."""


def test_tool_lists_are_cached_by_structure_and_errors_are_never_cached():
    plain = [{"function": {"name": "f", "parameters": {"type": "object", "required": ["a"]}}}]
    text = json.dumps(plain)
    assert tool_validators(json.loads(text), _fail) is tool_validators(json.loads(text), _fail)
    other = [{"function": {"name": "f", "parameters": {"type": "object", "required": ["b"]}}}]
    assert tool_validators(other, _fail)["f"]({"a": 1}) is False
    assert tool_validators([_Spec(plain[0])], _fail)["f"]({"a": 1}) is True
    twice = [plain[0], plain[0]]
    for _ in range(2):
        with pytest.raises(LossMaskError, match=r"tools\[1\].function.name declares 'f' twice"):
            tool_validators(twice, _fail)
