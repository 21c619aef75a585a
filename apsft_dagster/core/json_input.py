"""Strict JSON for every file a user hands the platform (inherited banks, amendment logs, run
folders, loss-mask exports): valid UTF-8, no key given twice in one object, no NaN or Infinity,
and nesting within what the parser can hold. Anything else is the caller's error type naming
where it was read; a reader never lets a parser's own exception through."""

from __future__ import annotations

import json
import math
import re

from apsft_dagster.core.errors import ApsftError

SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _Duplicate(ValueError):
    pass


def _unique(pairs: list[tuple[str, object]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _Duplicate(f"key {key!r} appears twice in one object")
    return obj


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is beyond a float's range")
    return value


def parse_json(data: bytes | str, where: str, error: type[ApsftError], parse_float=_finite,
               parse_constant=_no_constant) -> object:
    """The document in `data`, or `error` naming `where` and what is wrong (never another exception).
    `parse_constant` reads NaN and Infinity (refused unless a reader of trainers' logs maps them)."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data  # strict: no encoded surrogates, no UTF-16
        doc = json.loads(text, object_pairs_hook=_unique, parse_constant=parse_constant, parse_float=parse_float)
        if SURROGATE_ESCAPE.search(text):  # rare: then prove every escaped surrogate is half of a pair
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
        return doc
    except UnicodeDecodeError as exc:
        raise error(f"{where}: not valid UTF-8 (byte {exc.start}); re-export the file as UTF-8") from None
    except UnicodeEncodeError:
        raise error(f"{where}: a \\u escape names half a surrogate pair, which is no character; fix the text"
                    ) from None
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); fix the file"
                    ) from None
    except _Duplicate as exc:
        raise error(f"{where}: ambiguous JSON ({exc}); keep one of each key") from None
    except ValueError as exc:  # NaN or Infinity, or a number the parser cannot hold
        raise error(f"{where}: not valid JSON ({exc}); fix the file") from None
    except RecursionError:
        raise error(f"{where}: nested too deeply to read; flatten the document") from None


def error_field(err: dict, top: str = "(top level)") -> str:
    """The dotted field a pydantic validation error points at (`top` when it is the whole document)."""
    return ".".join(str(part) for part in err["loc"]) or top


def validated(model, doc: object, where: str, error: type[ApsftError], top: str, written_by: str) -> object:
    """`doc`, once `model` (a pydantic model) accepts it; else `error` naming `where`, the first field at fault
    and its message, and that such a document is written by `written_by`, never by hand."""
    from pydantic import ValidationError

    try:
        model.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise error(f"{where}: field {error_field(err, top)!r}: {err['msg']}; {written_by}, never by hand") from None
    return doc
