"""One requirement's verdict, the report's lines and its exit status; and the one way doctor runs a
program (a short timeout: a hung nvidia-smi must not hold the report). Standard library, Python 3.9+."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass

OK, WARN, FAILS, SKIPPED, NOT_NEEDED = "ok", "warn", "FAILS", "skipped", "not needed"
TIMEOUT_S = 5


@dataclass(frozen=True)
class Check:
    """`status` one of ok / warn / FAILS / skipped / not needed; `what` the requirement; `why` what was
    found against what is needed; `fix` the ways out (empty when there is nothing to do)."""

    status: str
    what: str
    why: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status:<10} {self.what}: {self.why}"
        return f"{text}. Fix: {self.fix}" if self.fix else text


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == FAILS]


def summary(checks: list[Check]) -> str:
    counts = ", ".join(f"{sum(c.status == s for c in checks)} {s}" for s in (OK, WARN, FAILS, SKIPPED, NOT_NEEDED)
                       if any(c.status == s for c in checks))
    bad = failed(checks)
    if bad:
        return f"doctor: {counts}: fix {', '.join(c.what for c in bad)} before the first GPU-minute"
    return f"doctor: every requirement met ({counts})"


def report(checks: list[Check]) -> str:
    """One line per requirement, then the summary."""
    return "".join(c.line() + "\n" for c in checks) + summary(checks) + "\n"


def exit_status(checks: list[Check]) -> int:
    return 1 if failed(checks) else 0


def run(command: list[str]) -> tuple[int, str] | None:
    """(exit status, stdout and stderr) of a program, None when it is not there; status 124 when it
    did not answer within TIMEOUT_S seconds. It runs in a session of its own, so that a hung program's
    children (which would hold its pipes open) are killed with it."""
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, errors="replace", start_new_session=True)
    except FileNotFoundError:
        return None
    except OSError as exc:  # not executable, not a program
        return 126, str(exc)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return 124, f"no answer within {TIMEOUT_S} s"
    return proc.returncode, out or ""
