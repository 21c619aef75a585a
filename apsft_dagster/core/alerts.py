"""Alert records for failed checks and failed runs: one JSON line each, optionally POSTed.

The JSONL file in the state folder is the durable record; the webhook is best effort, and its
outcome is written into the same line so the file alone tells whether anyone was notified.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from apsft_dagster.core.errors import AlertConfigError
from apsft_dagster.core.paths import state_dir
from apsft_dagster.core.store import json_scalar


def alert_path() -> Path:
    return state_dir() / "alerts.jsonl"


def webhook_url() -> str | None:
    """APSFT_ALERT_WEBHOOK; unset or empty means no POST (anything but an http(s) URL is refused
    when delivering, and recorded as refused)."""
    return os.environ.get("APSFT_ALERT_WEBHOOK") or None


def checked_url(url: str) -> str:
    """Only http(s) with a host: a file:// or ftp:// webhook would let a setting read or write elsewhere."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AlertConfigError(f"APSFT_ALERT_WEBHOOK {redacted(url)!r}: only http:// or https:// URLs with a host "
                               "are accepted")
    return url


def redacted(url: str) -> str:
    """The URL with any user:password@ replaced, for logs and the alert file."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


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
    headers, target = {"Content-Type": "application/json"}, url
    parts = urllib.parse.urlsplit(url)
    if parts.username is not None:  # user:password@ goes in an Authorization header, never in logs
        token = base64.b64encode(f"{urllib.parse.unquote(parts.username)}:"
                                 f"{urllib.parse.unquote(parts.password or '')}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
        target = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    request = urllib.request.Request(target, data=body, method="POST", headers=headers)
    shown = redacted(url)  # what the alert file keeps: never the credentials of a user:password@ URL
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return {"url": shown, "status": response.status}
    except urllib.error.HTTPError as error:  # urlopen raises on 4xx/5xx; the status is still worth keeping
        return {"url": shown, "status": error.code, "error": str(error).replace(url, shown)}
    except (OSError, ValueError) as error:  # refused, DNS, timeout (URLError/TimeoutError are OSErrors), bad URL
        return {"url": shown, "error": f"{type(error).__name__}: {error}".replace(url, shown)}


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
        try:
            line["webhook"] = post_json(record, checked_url(url), timeout)
        except AlertConfigError as error:  # recorded, not raised: the alert line itself must still be written
            line["webhook"] = {"url": redacted(url), "error": str(error)}
    append_line(line, path or alert_path())
    return line
