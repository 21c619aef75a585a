"""Alert records for failed ERROR checks and failed runs: one JSON line each, optionally POSTed.

The JSONL file in the state folder is the durable record; the webhook is best effort, and its
outcome is written into the same line so the file alone tells whether anyone was notified.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from apsft_dagster.core.paths import state_dir
from apsft_dagster.core.store import json_scalar


def alert_path() -> Path:
    return state_dir() / "alerts.jsonl"


def webhook_url() -> str | None:
    """APSFT_ALERT_WEBHOOK; unset or empty means no POST."""
    return os.environ.get("APSFT_ALERT_WEBHOOK") or None


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=UTC).isoformat()


def check_failure_record(*, asset_key: str, check_name: str, severity: str, run_id: str, partition: str | None,
                         timestamp: float, description: str | None = None, metadata: dict | None = None) -> dict:
    return {"kind": "asset_check_failed", "at": _iso(timestamp), "asset_key": asset_key, "check_name": check_name,
            "severity": severity, "run_id": run_id, "partition": partition, "description": description,
            "metadata": {key: json_scalar(value) for key, value in (metadata or {}).items()}}


def run_failure_record(*, run_id: str, job_name: str, timestamp: float, error: str | None,
                       step_errors: dict[str, str] | None = None, tags: dict[str, str] | None = None) -> dict:
    """`error` is the run's failure message; `step_errors` maps each failed step to the first line
    of its exception, which is what a reader needs to start looking."""
    return {"kind": "run_failed", "at": _iso(timestamp), "run_id": run_id, "job_name": job_name, "error": error,
            "step_errors": dict(step_errors or {}), "tags": dict(tags or {})}


def first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


def post_json(record: dict, url: str, timeout: float = 5.0) -> dict:
    """POST the record; never raises, returns {"url", "status"} or {"url", "error"} (plus status on HTTP errors)."""
    body = json.dumps(record, sort_keys=True, ensure_ascii=False).encode("utf-8")
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return {"url": url, "status": response.status}
    except urllib.error.HTTPError as error:  # urlopen raises on 4xx/5xx; the status is still worth keeping
        return {"url": url, "status": error.code, "error": str(error)}
    except (OSError, ValueError) as error:  # refused, DNS, timeout (URLError/TimeoutError are OSErrors), bad URL
        return {"url": url, "error": f"{type(error).__name__}: {error}"}


def append_line(record: dict, path: Path) -> None:
    """Append one line and fsync it, so a crash can lose at most the line being written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def deliver(record: dict, path: Path | None = None, url: str | None = None, timeout: float = 5.0) -> dict:
    """POST first (when a webhook is configured), then write the line with the POST's outcome.
    Returns the line as written; the webhook receives the record without the `webhook` field."""
    url = url if url is not None else webhook_url()
    line = dict(record)
    if url:
        line["webhook"] = post_json(record, url, timeout)
    append_line(line, path or alert_path())
    return line
