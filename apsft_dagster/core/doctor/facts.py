"""What the project asks of the host, read where it is written once: the CUDA release from the GPU lock
(its `cuda-toolkit` pin, else the `-cuNN` suffix of its nvidia-* wheels), the Python version and the
glibc floor from scripts/gpu_settings.sh. Only the driver floor of each CUDA major is written here, as
NVIDIA's release notes give it. Standard library, Python 3.9+."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = Path("scripts") / "gpu_settings.sh"
LOCK = Path("requirements") / "gpu.lock"
# NVIDIA's minimum Linux driver for each CUDA major's toolkits (minor version compatibility): the
# driver of the major's GA release. A CUDA 13 wheel on a 535 or 570 driver finds no usable CUDA.
DRIVER_FLOORS = {12: "525.60.13", 13: "580.65.06"}
TOOLKIT_PIN = re.compile(r"^cuda-toolkit==(\d+)\.(\d+)[^\s\\]*", re.MULTILINE)
CU_WHEEL = re.compile(r"^nvidia-[a-z0-9-]+-cu(\d+)==", re.MULTILINE)
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


@dataclass(frozen=True)
class Lock:
    """The GPU lock as the host checks need it: the CUDA release its wheels are built for (minor None
    when only the wheels' -cuNN names say it) and where that was read."""

    path: Path
    cuda_major: int
    cuda_minor: int | None
    source: str
    pins: dict

    @property
    def cuda(self) -> str:
        return f"CUDA {self.cuda_major}" + ("" if self.cuda_minor is None else f".{self.cuda_minor}")

    def release(self, sep: str = ".") -> str:
        """`13.0` (or `13-0`, as NVIDIA's package names write it); minor 0 when the lock does not say."""
        return f"{self.cuda_major}{sep}{self.cuda_minor or 0}"

    def driver_floor(self) -> str | None:
        return DRIVER_FLOORS.get(self.cuda_major)


def lock_path(root: Path = ROOT) -> Path:
    """requirements/gpu.lock, or `APSFT_GPU_LOCK` as scripts/gpu_settings.sh reads it."""
    found = Path(os.environ.get("APSFT_GPU_LOCK") or LOCK)
    return found if found.is_absolute() else root / found


def read_lock(path: Path) -> Lock | None:
    """The lock's CUDA release; None when the file is absent or names no CUDA wheel."""
    try:
        text = path.read_text()
    except OSError:
        return None
    pins = {name.lower(): version for name, version in PIN.findall(text)}
    toolkit = TOOLKIT_PIN.search(text)
    if toolkit:
        return Lock(path, int(toolkit.group(1)), int(toolkit.group(2)), f"{toolkit.group(0)} in {path.name}", pins)
    majors = sorted({int(m) for m in CU_WHEEL.findall(text)})
    if len(majors) != 1:
        return None
    return Lock(path, majors[0], None, f"the nvidia-*-cu{majors[0]} wheels in {path.name}", pins)


def read_settings(root: Path = ROOT) -> dict:
    """The `NAME=value` assignments of scripts/gpu_settings.sh (the plain ones; not those computed)."""
    text = (root / SETTINGS).read_text()
    return dict(re.findall(r"^(GPU_[A-Z_]+)=([^\s\"'$()]+)\s*(?:#.*)?$", text, flags=re.MULTILINE))


def glibc_floor(platform_tag: str) -> tuple[int, int]:
    """`x86_64-manylinux_2_31` -> (2, 31)."""
    found = re.search(r"manylinux_(\d+)_(\d+)$", platform_tag)
    if not found:
        raise ValueError(f"{SETTINGS}: GPU_PLATFORM {platform_tag!r} is not a manylinux_X_Y platform")
    return int(found.group(1)), int(found.group(2))


def version_tuple(text: str) -> tuple[int, ...]:
    """`580.95.05` -> (580, 95, 5); ValueError on anything else."""
    if not re.fullmatch(r"\d+(\.\d+)*", text.strip()):
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(part) for part in text.strip().split("."))
