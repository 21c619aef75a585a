"""The review points (the seed's resume-only boundaries): `apsft run` stops after the seal or after selection,
and only `apsft run --resume` goes past, recording who resumed and when.

`reviews.jsonl` (receipted, rewritten whole on each record) holds one line per event: `pause` (the point,
the profile, the UTC time) or `resume` (the same, and who). Each line carries the SHA-256 of the one
before it, so an edited or dropped line breaks the chain. A point once resumed is not paused at again.
`plan` decides, before anything is written, how much of a run's stage list may run and where it pauses.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from apsft_dagster.core.config import POINTS
from apsft_dagster.core.errors import ReviewError
from apsft_dagster.core.json_input import parse_json, validated
from apsft_dagster.core.layout import REVIEW_LOG
from apsft_dagster.core.store import Store, sha256_bytes

GENESIS = "0" * 64
NAMES = {"seal": "the evidence seal", "selection": "selection"}


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    seq: Annotated[int, Field(ge=1)]
    event: Literal["pause", "resume"]
    point: Literal[POINTS]
    profile: Annotated[str, Field(min_length=1)]
    at: str
    by: Annotated[str, Field(min_length=1)] | None = None
    prev_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


def read_reviews(store: Store) -> list[dict]:
    """Every event, receipt verified, shape and chain checked; [] before the first pause."""
    if not store.exists(REVIEW_LOG):
        return []
    where, events, prev = str(store.path(REVIEW_LOG)), [], GENESIS
    for n, line in enumerate(store.get_bytes(REVIEW_LOG).splitlines(keepends=True), start=1):
        event = validated(_Event, parse_json(line, f"{where} line {n}", ReviewError), f"{where} line {n}",
                          ReviewError, "(the line)", "the log is written by `apsft run`")
        if event["seq"] != n or event["prev_sha256"] != prev:
            raise ReviewError(f"{where} line {n}: out of sequence or chain broken (a line was edited or removed); "
                              "restore the log")
        events.append(event)
        prev = sha256_bytes(line)
    return events


def open_pause(events: list[dict]) -> dict | None:
    """The pause not yet resumed, if any."""
    return events[-1] if events and events[-1]["event"] == "pause" else None


def plan(events: list[dict], order: list[str], selected: list[str], at_job: dict[str, str],
         asked: Iterable[str], resuming: bool) -> tuple[list[str], str | None]:
    """(the jobs of `selected` to run, the point to pause at after the last of them, or None).

    `order`: every stage job in order; `at_job`: point -> the job it follows; `asked`: the points the
    flags and the profile ask for. ReviewError when the run would pass an open pause without `resuming`
    (a resume itself is checked by `resumable`)."""
    paused = open_pause(events)
    if paused is not None and not resuming:
        job = at_job[paused["point"]]
        beyond = [j for j in selected if order.index(j) > order.index(job)]
        if beyond:
            raise ReviewError(f"the run is paused for review after {NAMES[paused['point']]} ({job}, {paused['at']}, "
                              f"profile {paused['profile']}); {', '.join(beyond[:3])} must wait. Review, then "
                              "`apsft run --resume [--by NAME]` records who resumed and when and goes on; until then "
                              f"only stages up to {job} run (--to {job}). Nothing was run")
    done = {e["point"] for e in events}  # paused at already: open now, or resumed
    pending = [at_job[p] for p in POINTS if p in set(asked) - done and at_job[p] in selected]
    if not pending:
        return list(selected), None
    stop = min(pending, key=order.index)
    point = next(p for p, job in at_job.items() if job == stop)
    return list(selected[:selected.index(stop) + 1]), point


def record(store: Store, event: str, point: str, profile: str, by: str | None = None, at: str | None = None) -> dict:
    """Append one event (the whole log rewritten atomically with a new receipt)."""
    events = read_reviews(store)
    body = store.get_bytes(REVIEW_LOG) if events else b""
    line = {"seq": len(events) + 1, "event": event, "point": point, "profile": profile,
            "at": at or dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "prev_sha256": sha256_bytes(body.splitlines(keepends=True)[-1]) if events else GENESIS}
    if by is not None:
        line["by"] = by
    store.put_bytes(REVIEW_LOG, body + json.dumps(line, sort_keys=True, ensure_ascii=False).encode() + b"\n")
    return line


def resumable(events: list[dict], profile: str, by: str) -> dict:
    """The open pause `profile` may resume as `by`; ReviewError when none is open, the pause was made by
    another profile, or no name is given."""
    paused = open_pause(events)
    if paused is None:
        raise ReviewError(f"{REVIEW_LOG}: no open review pause to resume; run without --resume")
    if paused["profile"] != profile:
        raise ReviewError(f"{REVIEW_LOG}: the pause after {NAMES[paused['point']]} was made by profile "
                          f"{paused['profile']}, and this run is profile {profile}; resume with that profile "
                          f"(--profile {paused['profile']} or its --config), or use this profile's own store")
    if not by.strip():
        raise ReviewError("--by: a resume names who resumed (default: $USER or the login name); pass --by NAME")
    return paused


def resume(store: Store, profile: str, by: str, at: str | None = None) -> dict:
    """Record who resumes the open pause, and when (`resumable`'s refusals first: nothing written)."""
    paused = resumable(read_reviews(store), profile, by)
    return record(store, "resume", paused["point"], profile, by=by.strip(), at=at)
