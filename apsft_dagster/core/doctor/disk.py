"""Free disk against what a GPU run writes: the environment, the model snapshot and the merged models,
summed per filesystem (the store and the snapshot may each live on their own). Without a profile the
sizes are estimates for Qwen3.5-4B; `apsft doctor --profile P` sizes them from the snapshot that is
here and the profile's policies (core/doctor/profile_checks.py). Standard library, Python 3.9+."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

if __package__:
    from apsft_dagster.core.doctor.check import FAILS, OK, WARN, Check
else:  # run as a file by setup, before any venv (core/doctor/__init__.py says why)
    from check import FAILS, OK, WARN, Check

GB = 10**9
ENV_BYTES = 20 * GB  # .venv-gpu (~9 GB: vLLM, the CUDA torch, the nvidia-* wheels) and pip's cache of its wheels
SNAPSHOT_BYTES = 9 * GB  # Qwen3.5-4B in bf16 (~4.5e9 parameters x 2 bytes), until a snapshot is here to measure
DEFAULT_POLICIES = 6  # one merged model per arm (core/selection/arms.py ARMS; a test keeps them equal)


@dataclass(frozen=True)
class Need:
    """`size` bytes written under `path` (which need not exist yet). Not `required`: a warning when it
    does not fit, for what is written later or may never be (Stage B's replication runs only when Stage A
    triggers); `when` says which."""

    what: str
    path: Path
    size: int
    required: bool = True
    when: str = ""


def gb(size: int) -> str:
    return f"{size / GB:.1f} GB"


def default_needs(root: Path, setup: bool = False) -> list[Need]:
    """Without a profile: the environment (unless .venv-gpu is here), a snapshot and the merged models,
    all at the project root. For setup only the environment is required; the rest warns."""
    needs = [] if (root / ".venv-gpu").exists() else [Need(".venv-gpu and pip's cache", root, ENV_BYTES)]
    merged, later = DEFAULT_POLICIES * SNAPSHOT_BYTES, "after setup" if setup else ""
    return needs + [Need("a Qwen3.5-4B snapshot (estimate)", root / "models", SNAPSHOT_BYTES, not setup, later),
                    Need(f"{DEFAULT_POLICIES} merged models (Stage A)", root / ".apsft", merged, not setup, later),
                    Need(f"{DEFAULT_POLICIES} more (Stage B's replication)", root / ".apsft", merged, False,
                         "if Stage B runs")]


def _existing(path: Path) -> Path:
    """The nearest folder of `path` that exists: where its bytes will land."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def disk_checks(needs: list[Need]) -> list[Check]:
    """One line per filesystem the needs land on."""
    if not needs:
        return [Check(OK, "disk", "nothing of size to write (no GPU environment, snapshot or merged snapshots)")]
    groups: dict = {}
    for need in needs:
        anchor = _existing(need.path)
        groups.setdefault(anchor.stat().st_dev, (anchor, []))[1].append(need)
    return [_filesystem_check(anchor, held) for anchor, held in groups.values()]


def _filesystem_check(anchor: Path, needs: list[Need]) -> Check:
    free = shutil.disk_usage(anchor).free
    required = sum(n.size for n in needs if n.required)
    total = sum(n.size for n in needs)
    parts = ", ".join(f"{n.what} {gb(n.size)}" + (f" ({n.when})" if n.when else "") for n in needs)
    what = f"disk at {anchor}"
    fix = ("free space there, or put the store (APSFT_STORE_DIR) or the snapshot (APSFT_MODEL_DIR) on a larger "
           "disk; merge.keep_weights: false deletes merged weights only after Stage B's analysis, so not the peak")
    if free < required:
        return Check(FAILS, what, f"{gb(free)} free, {gb(required)} needed now ({parts})", fix)
    if free < total:
        return Check(WARN, what, f"{gb(free)} free, short of the {gb(total)} for everything ({parts}); what is "
                                 f"needed now ({gb(required)}) fits", fix)
    return Check(OK, what, f"{gb(free)} free, {gb(total)} needed ({parts})")
