"""What a killed process leaves on disk, found and cleared; and the store's one invariant checked.

Every write goes through a temp sibling named `.<name>.tmp-<pid>` (and a directory swap through
`.<name>.old-<pid>`), renamed into place when whole (core/store.py). A SIGKILL runs no cleanup, so
those siblings stay. `dead_temps` finds the ones whose process is gone (a live process's are its
work in flight) and `sweep` removes them; `apsft run` sweeps the store and the model cache before
it starts (issue 37).

The invariant every moment of a run keeps, whenever it is killed: a receipt present matches its
artifact (an artifact's old receipt is removed before the artifact is replaced, the new one
written after it). `receipt_problems` lists each receipt that does not.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from apsft_dagster.core.errors import HashMismatchError, MissingArtifactError
from apsft_dagster.core.store import RECEIPT_SUFFIX, Store

TEMP = re.compile(r"^\..+\.(?:tmp|old)-(\d+)$")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def dead_temps(root: str | os.PathLike) -> list[Path]:
    """Temp siblings under `root` (files or folders) whose writing process is gone."""
    root, found = Path(root), []
    if not root.is_dir():
        return found
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            m = TEMP.match(name)
            if m and not alive(int(m.group(1))):
                found.append(Path(folder) / name)
        dirs[:] = [d for d in dirs if not TEMP.match(d)]  # never inside a temp folder
    return sorted(found)


def sweep(root: str | os.PathLike) -> list[Path]:
    """Remove the temp siblings of processes that are gone; returns what was removed."""
    gone = dead_temps(root)
    for path in gone:
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    return gone


def receipt_problems(store: Store) -> list[str]:
    """Each receipt under the store whose artifact is missing or differs from it."""
    problems = []
    for receipt in sorted(store.root.rglob(f"*{RECEIPT_SUFFIX}")):
        if TEMP.match(receipt.name):
            continue
        name = receipt.relative_to(store.root).as_posix()[:-len(RECEIPT_SUFFIX)]
        try:
            store.verify(name)
        except (HashMismatchError, MissingArtifactError) as exc:
            problems.append(str(exc))
    return problems
