"""The embedded models the project ships built: package data, one folder per cache key.

`apsft_dagster/models/<key>/` holds a model exactly as the model cache holds it (the files and
`cache_entry.json`: its build report, its fingerprint and each file's SHA-256), for the profiles
whose model the project trains itself (`SHIPPED_PROFILES`). A run whose cache lacks its key takes
the shipped entry of that key when there is one: every file is verified first, and an entry that
fails (a flipped byte, a missing or extra file) is refused naming the file, before anything is
copied. A fresh clone's `apsft run` therefore does no pretraining. `APSFT_MODEL_CACHE=off` ignores
the shipped entries and builds; `python scripts/refresh_model_seed.py` rebuilds them when the key
moves, and `tests/test_model_cache.py` fails, naming that command, until it is run.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from apsft_dagster.core.errors import HashMismatchError
from apsft_dagster.core.store import dir_digests, fingerprint

SHIPPED = Path(__file__).resolve().parents[2] / "models"  # apsft_dagster/models
SHIPPED_PROFILES = ("smoke", "smoke_vllm", "laptop")  # the vLLM lane's model is smoke_vllm's
ENTRY = "cache_entry.json"  # as in the model cache (core/embedded/cache.py)


def shipped_entry(key: str) -> Path | None:
    """The shipped folder of `key`, or None when the project ships no model under that key."""
    folder = SHIPPED / key
    return folder if (folder / ENTRY).is_file() else None


def verify_shipped(folder: Path) -> dict:
    """The entry's report, once every file matches the SHA-256 recorded for it; else
    HashMismatchError naming the first file that does not (or is missing, or is not listed)."""
    try:
        recorded = json.loads((folder / ENTRY).read_text())
        files = recorded["files"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise HashMismatchError(f"shipped model {folder / ENTRY}: unreadable or without its file list ({exc}); "
                                f"restore it from git (`git checkout -- {folder}`) or build with "
                                f"APSFT_MODEL_CACHE=off") from exc
    found = entry_files(folder)
    for name in sorted(set(files) | set(found)):
        if files.get(name) != found.get(name):
            what = ("is missing" if name not in found else "is not listed in its entry" if name not in files
                    else f"has SHA-256 {found[name]}, its entry records {files[name]}")
            raise HashMismatchError(f"shipped model file {folder / name} {what}: refused, nothing was copied from "
                                    f"it; restore it from git (`git checkout -- {folder}`) or build with "
                                    f"APSFT_MODEL_CACHE=off")
    if fingerprint(found) != recorded["fingerprint"]:
        raise HashMismatchError(f"shipped model {folder}: its files do not give the fingerprint in {ENTRY}; refused")
    return recorded["report"]


def entry_files(folder: Path) -> dict[str, str]:
    """An entry's files (relative name -> SHA-256) but its `cache_entry.json`: what the fingerprint covers."""
    return {k: v for k, v in dir_digests(folder).items() if k != ENTRY}


def copy_entry(source: Path, target: Path) -> None:
    """Copy a whole entry folder into place through a temp sibling, so a kill leaves no half entry."""
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp)
    place_entry(tmp, target)


def place_entry(tmp: Path, target: Path) -> None:
    """Rename a finished temp folder to `target`. Where another process placed an entry there
    meanwhile (two runs, or two test workers, missing the same key at once), the one whose files
    match its recorded fingerprint stays, so a reader copying from it never sees it vanish: equal
    keys give equal bytes. A stale or broken one is moved aside, then removed."""
    try:
        os.replace(tmp, target)  # a folder renames onto a missing or empty one only
        return
    except OSError:
        if _intact(target):
            shutil.rmtree(tmp, ignore_errors=True)
            return
    aside = target.with_name(f".{target.name}.stale-{os.getpid()}")
    os.replace(target, aside)
    os.replace(tmp, target)
    shutil.rmtree(aside, ignore_errors=True)


def _intact(entry: Path) -> bool:
    try:
        recorded = json.loads((entry / ENTRY).read_text())["fingerprint"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return False
    return fingerprint(entry_files(entry)) == recorded
