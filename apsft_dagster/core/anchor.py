"""The design anchor (the seed's "Immutable Design Anchor"): the design as frozen before the harvest.

`design_anchor.json`, written once per store by `apsft freeze` (core/freeze.py), holds the profile,
the config digest and the canonical body it hashes (`Config.digest_body`), the sealed code
(core/seal.py `code_digests()`, file by file, the glob patterns that chose them, and the SHA-256 of
the map's canonical JSON), the UTC date, the rationale, the evidence present and how many amendments
preceded it. Every receipt written after it cites its SHA-256 (core/store.py).

This module only reads: `read_anchor` and `changes_since_anchor` (what differs now, by name). It
imports neither the seal nor the amendment log, so both may call it.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from apsft_dagster.core.bank_keys import flat
from apsft_dagster.core.config import Config, canonical_json
from apsft_dagster.core.errors import AnchorError, HashMismatchError
from apsft_dagster.core.json_input import parse_json, validated
from apsft_dagster.core.layout import DESIGN_ANCHOR
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.store import Store, sha256_bytes, sha256_file

FORMAT = "apsft-design-anchor/1"
_SHA256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
_CORE = Path(__file__).resolve().parent


class _Anchor(BaseModel):
    """The document as `freeze` writes it (a hand-made one must match)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    format: Literal[FORMAT]
    profile: Annotated[str, Field(min_length=1)]
    config_digest: _SHA256
    config: dict
    code_patterns: list[str]
    code: dict[str, _SHA256]
    code_digest: _SHA256
    date: str
    rationale: Annotated[str, Field(min_length=1)]
    evidence: dict[str, Annotated[int, Field(ge=1)]]
    amendments: Annotated[int, Field(ge=0)]


def code_now(patterns: list[str]) -> dict[str, str]:
    """The sealed code's files (glob patterns relative to core/, as core/seal.py `SEALED_CODE`), path relative
    to the project -> SHA-256, as `seal.code_digests()` lists them."""
    files = sorted({p for pattern in patterns for p in _CORE.glob(pattern) if p.is_file()})
    return {p.relative_to(PROJECT_ROOT).as_posix(): sha256_file(p) for p in files}


def code_digest(code: dict[str, str]) -> str:
    """The sealed code's one digest: SHA-256 of its file map's canonical JSON."""
    return sha256_bytes(canonical_json(code))


def utc_date(date: str | None) -> str:
    """`date` (ISO 8601 with a zone) as UTC ISO, or now; AnchorError naming it when it is not one."""
    if date is None:
        return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    try:
        when = dt.datetime.fromisoformat(date)
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise AnchorError(f"date {date!r}: not an ISO 8601 time with a zone; use e.g. 2026-12-01T09:30:00+00:00")
    return when.astimezone(dt.UTC).isoformat(timespec="seconds")


def read_anchor(store: Store) -> dict | None:
    """The store's anchor (receipt verified, shape checked) with its file's SHA-256 as `sha256`; None when
    the store has none. AnchorError names the file and field of a changed or malformed anchor."""
    if not store.exists(DESIGN_ANCHOR):
        return None
    where = str(store.path(DESIGN_ANCHOR))
    try:
        data, digest = store.read(DESIGN_ANCHOR)
    except HashMismatchError as exc:
        raise AnchorError(f"the design anchor changed after it was frozen: {exc}") from None
    doc = validated(_Anchor, parse_json(data, where, AnchorError), where, AnchorError, "(the anchor)",
                    "the anchor is written by `apsft freeze`")
    return {**doc, "sha256": digest}


def changes_since_anchor(store: Store, config: Config) -> list[str]:
    """What differs from the anchor, one line each: the config digest, then each config field (dotted, old ->
    new), then each sealed code file (changed, added, removed). [] when the store has no anchor or nothing
    differs. The config compared is the sealed one (a rehearsal's is its registered profile's)."""
    anchor = read_anchor(store)
    if anchor is None:
        return []
    changes = []
    if config.sealed_digest != anchor["config_digest"]:
        changes.append(f"config digest {anchor['config_digest'][:12]} -> {config.sealed_digest[:12]}")
        old, new = flat(anchor["config"]), flat(config.registered.digest_body)
        changes += [f"config {field}: {_shown(old, field)} -> {_shown(new, field)}"
                    for field in sorted(set(old) | set(new)) if old.get(field, _ABSENT) != new.get(field, _ABSENT)]
    code, frozen = code_now(anchor["code_patterns"]), anchor["code"]
    for path in sorted(set(code) | set(frozen)):
        if path not in code:
            changes.append(f"sealed code {path}: removed")
        elif path not in frozen:
            changes.append(f"sealed code {path}: added")
        elif code[path] != frozen[path]:
            changes.append(f"sealed code {path}: SHA-256 {frozen[path][:12]} -> {code[path][:12]}")
    return changes


_ABSENT = object()


def _shown(values: dict, field: str) -> str:
    value = values.get(field, _ABSENT)
    return "(absent)" if value is _ABSENT else canonical_json(value).decode()


# What the anchor freezes for good (the seed re-anchored "without changing any design text, threshold, split,
# arm, or code", and kept its failed gate's threshold): the seeds, the splits, the gates' thresholds and Stage
# B's trigger thresholds. After the anchor an amendment may record other changes, never one of these.
FROZEN_AFTER_ANCHOR = ("seeds.", "tasks.", "harvest.min_eligible", "scoring.parity_threshold",
                       "scoring.calibration_traces", "scoring.on_failed_gate", "stage_b.min_gain",
                       "stage_b.min_lower_bound", "stage_b.max_parse_rate_loss", "stage_b.max_family_macro_loss")


def frozen(field: str) -> bool:
    return any(field == f or (f.endswith(".") and field.startswith(f)) for f in FROZEN_AFTER_ANCHOR)


def forbidden_changes(store: Store, config: Config) -> list[str]:
    """Each frozen field (FROZEN_AFTER_ANCHOR) whose value differs from the anchor's, as `field: old -> new`;
    [] without an anchor."""
    anchor = read_anchor(store)
    if anchor is None:
        return []
    old, new = flat(anchor["config"]), flat(config.registered.digest_body)
    return [f"{field}: {_shown(old, field)} -> {_shown(new, field)}" for field in sorted(set(old) | set(new))
            if frozen(field) and old.get(field, _ABSENT) != new.get(field, _ABSENT)]


def design_now(store: Store, config: Config) -> dict | None:
    """The design an amendment recorded now covers (the config digest and the sealed code's digest, by the
    anchor's patterns); None without an anchor."""
    anchor = read_anchor(store)
    if anchor is None:
        return None
    return {"config_digest": config.sealed_digest, "code_digest": code_digest(code_now(anchor["code_patterns"]))}
