"""Tool-parameter schemas compiled to Python (fastjsonschema) where that gives jsonschema's answer.

fastjsonschema implements draft-07 and differs from jsonschema's Draft 2020-12 in places: array
`items`, `$ref`/`$defs`, `pattern` (it rewrites `$` to `\\Z`), `format` (it asserts formats),
numeric bounds (it applies them to booleans), `enum` (Python `==`, so `True == 1`), `const` (it
fails to compile without detailed exceptions). A schema is compiled only when every keyword in it
is one where the two agree on every JSON value; anything else stays with jsonschema (a checked
validator, cached per schema in tool_calls.py). tests/test_loss_mask_schema.py holds both to the
same cases.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import fastjsonschema

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment"})
NUMERIC = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
# Counts and lengths: both libraries apply them to the same types (len() of a str, a list, a dict).
SIZES = frozenset({"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"})
# fastjsonschema turns property names into Python identifiers; plain names are safely spelt.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_]+\Z")


def fast_validator(schema: object) -> Callable[[object], bool] | None:
    """`is_valid` compiled with fastjsonschema, or None when the schema leaves the agreed subset.
    The schema must already have passed Draft 2020-12's check_schema."""
    if not isinstance(schema, dict) or schema.get("$schema", DRAFT_2020_12) != DRAFT_2020_12:
        return None
    body = {k: v for k, v in schema.items() if k != "$schema"}
    if not _agreed(body):
        return None
    try:
        validate = fastjsonschema.compile(body, use_default=False, use_formats=False, detailed_exceptions=False)
    except fastjsonschema.JsonSchemaDefinitionException:  # valid Draft 2020-12 it cannot compile (e.g. `required`
        return None  # naming a property that additionalProperties: false forbids): jsonschema judges it

    def is_valid(value: object) -> bool:
        try:
            validate(value)
        except fastjsonschema.JsonSchemaException:
            return False
        return True

    return is_valid


def _agreed(schema: object) -> bool:
    """Every keyword, at every depth, one where fastjsonschema and jsonschema agree."""
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    for key, value in schema.items():
        if key in ANNOTATIONS or key in SIZES:
            continue
        if key == "type":
            ok = all(isinstance(t, str) and t in TYPES for t in (value if isinstance(value, list) else [value]))
        elif key == "required":
            ok = all(_PLAIN_NAME.match(name) for name in value)
        elif key in NUMERIC:  # bounds only where the type already excludes booleans
            ok = kind in ("number", "integer") and _is_finite_number(value)
        elif key == "enum":  # strings compare equal only to equal strings, in both
            ok = all(isinstance(v, str) for v in value)
        elif key == "properties":
            ok = all(_PLAIN_NAME.match(name) and _agreed(sub) for name, sub in value.items())
        elif key == "additionalProperties":
            ok = isinstance(value, bool) or _agreed(value)
        elif key == "items":
            ok = _agreed(value)
        else:
            ok = False
        if not ok:
            return False
    return True


def _is_finite_number(value: object) -> bool:
    """A bound fastjsonschema can write into its code (NaN and infinity have no literal)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)
