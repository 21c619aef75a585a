"""Amendments and deviations as data, classified by the evidence that existed when recorded.

A record holds a date, a text and the set of evidence assets present in the store at recording
time (with their artifact counts). Its class is derived from that set, never written
by hand: *prospective amendment* when no score, rollout or outcome evidence existed yet,
otherwise a *post-score*, *post-rollout* or *post-outcome deviation* after the latest stage
that did. Each record carries the SHA-256 of the previous line, so an edited or dropped
record breaks the chain; the evidence seal binds the log's digest.

A record may name a new training budget (`budget_device_hours`); it also notes the selection
present when it was recorded (`selection.identity`: the SHA-256 of the arm files' digests), so
the budget gate honours a budget only for the selection it was decided on.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from apsft_dagster.core.errors import AmendmentError
from apsft_dagster.core.json_input import error_field, parse_json
from apsft_dagster.core.layout import AMENDMENT_LOG, EVIDENCE_STAGES, SFT_MANIFEST
from apsft_dagster.core.store import RECEIPT_SUFFIX, Store, json_bytes, sha256_bytes

GENESIS = "0" * 64
SHA256 = r"^[0-9a-f]{64}$"


def evidence_snapshot(store: Store) -> dict[str, int]:
    """The evidence assets present right now, each with its count of receipted artifacts."""
    counts = {}
    for name in EVIDENCE_STAGES:
        path = store.path(name)
        n = (sum(1 for p in path.rglob(f"*{RECEIPT_SUFFIX}") if "keys" not in p.relative_to(path).parts[:-1])
             if path.is_dir() else int(store.exists(name)))  # a shard's key (core/bank_keys.py) is not evidence
        if n:
            counts[name] = n
    return counts


def classify(evidence: dict[str, int]) -> str:
    stages = {EVIDENCE_STAGES[name] for name in evidence}
    for stage in ("outcome", "rollout", "score"):
        if stage in stages:
            return f"post-{stage} deviation"
    return "prospective amendment"


class _Selection(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    identity: Annotated[str, Field(pattern=SHA256)]


class _Cover(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    from_: Annotated[object, Field(alias="from")]
    to: object


class _Record(BaseModel):
    """One line of the log, as record_amendment writes it (a hand-made line must match)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    seq: Annotated[int, Field(ge=1)]
    date: str
    text: Annotated[str, Field(min_length=1)]
    evidence: dict[Literal[tuple(EVIDENCE_STAGES)], Annotated[int, Field(ge=1)]]
    prev_sha256: Annotated[str, Field(pattern=SHA256)]
    budget_device_hours: Annotated[float, Field(gt=0)] | None = None
    selection: _Selection | None = None
    # the settings this amendment covers, each with the value the evidence was made under and this config's
    # (`apsft amend --covers`, core/bank_key_check.covers): shards made under the old value are kept
    covers: dict[str, _Cover] | None = None
    # on a store with a design anchor: the design this amendment covers (core/anchor.design_now)
    design: dict[str, Annotated[str, Field(pattern=SHA256)]] | None = None


def _checked(where: str, n: int, record: object) -> dict:
    try:
        _Record.model_validate(record)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = error_field(err, "(the record)")
        raise AmendmentError(f"{where} line {n}: field {field!r}: {err['msg']}; a record is written by "
                             "`apsft amend`, never by hand (restore the log from version control)") from None
    if record["seq"] != n:
        raise AmendmentError(f"{where} line {n}: field 'seq' is {record['seq']}, expected {n}")
    _date(record["date"], f"{where} line {n}: field 'date'")
    return record


def _date(day: str, where: str) -> str:
    try:
        dt.date.fromisoformat(day)
    except ValueError:
        raise AmendmentError(f"{where}: {day!r} is not a date; use YYYY-MM-DD") from None
    return day


def read_log(store: Store) -> list[dict]:
    """Every record, receipt verified, shape and chain checked; [] when nothing was recorded.
    Refusals name the log, the line and the field (AmendmentError)."""
    if not store.exists(AMENDMENT_LOG):
        return []
    where = str(store.path(AMENDMENT_LOG))
    records, prev = [], GENESIS
    for n, line in enumerate(store.get_bytes(AMENDMENT_LOG).splitlines(keepends=True), start=1):
        record = _checked(where, n, parse_json(line, f"{where} line {n}", AmendmentError))
        if record["prev_sha256"] != prev:
            raise AmendmentError(f"{where} line {n}: chain broken (prev_sha256 does not match line "
                                 f"{n - 1}); a record was edited or removed. Restore the log from version control")
        records.append(record)
        prev = sha256_bytes(line)
    return records


def selection_identity(manifest: dict) -> str:
    """SHA-256 of the arm files' digests: the same selection keeps it across a reseal."""
    return sha256_bytes(json_bytes({e["arm"]: e["sha256"] for e in manifest["arms"]}))


def record_amendment(store: Store, text: str, date: str | None = None, *,
                     budget_device_hours: float | None = None, covers: dict | None = None,
                     design: dict | None = None) -> dict:
    """Append one record (atomically: the whole log is rewritten with a new receipt). `covers`: {field:
    {"from": old, "to": new}}, checked by the caller (core/bank_key_check.covers)."""
    if not text.strip():
        raise AmendmentError("an amendment needs a text saying what changed and why")
    if budget_device_hours is not None and not (math.isfinite(budget_device_hours) and budget_device_hours > 0):
        raise AmendmentError(f"budget {budget_device_hours!r} device-hours: must be a finite number > 0")
    day = _date(date or dt.datetime.now(dt.UTC).date().isoformat(), "date")
    records = read_log(store)
    body = store.get_bytes(AMENDMENT_LOG) if records else b""
    prev = sha256_bytes(body.splitlines(keepends=True)[-1]) if records else GENESIS
    record = {"seq": len(records) + 1, "date": day, "text": text.strip(), "evidence": evidence_snapshot(store),
              "prev_sha256": prev}
    if covers:
        record["covers"] = covers
    if design:
        record["design"] = design
    if budget_device_hours is not None:
        manifest = json.loads(store.get_bytes(SFT_MANIFEST)) if store.exists(SFT_MANIFEST) else None
        record["budget_device_hours"] = float(budget_device_hours)
        record["selection"] = None if manifest is None else {"identity": selection_identity(manifest)}
    store.put_bytes(AMENDMENT_LOG, body + json.dumps(record, sort_keys=True, ensure_ascii=False).encode() + b"\n")
    return {**record, "classification": classify(record["evidence"])}


def classified(store: Store) -> list[dict]:
    """The log as the seal shows it: each record with its derived classification."""
    return [{**r, "classification": classify(r["evidence"])} for r in read_log(store)]
