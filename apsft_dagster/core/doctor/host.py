"""The host checks: what the GPU environment needs of this machine before anything is installed. One
line per requirement (ok / warn / FAILS, what, why, the fix), then a summary.

    python3 apsft_dagster/core/doctor/host.py [--setup]

exits 0 when every requirement is met (warnings allowed), 1 on any FAILS, 2 on a bad argument.
Standard library only, Python 3.9 or newer, so that the first step of `bash scripts/setup.sh gpu` can
run it with the system python3 before any venv exists (`--setup`: of the disk, only the environment's
share is required; the snapshot and the merged models warn). `apsft doctor` runs the same checks, and
with a profile adds its disk needs and snapshot (core/doctor/profile_checks.py). Every program it asks
(nvidia-smi, the Python it would take, nvcc) gets 5 seconds.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

if __package__:
    from apsft_dagster.core.doctor.check import FAILS, NOT_NEEDED, OK, Check, exit_status, report, run
    from apsft_dagster.core.doctor.disk import Need, default_needs, disk_checks
    from apsft_dagster.core.doctor.facts import ROOT, glibc_floor, lock_path, read_lock, read_settings
    from apsft_dagster.core.doctor.gpu import DRIVER, GPU, NVCC, gpu_checks, nvcc_check
else:  # run as a file by setup, before any venv (core/doctor/__init__.py says why)
    from check import FAILS, NOT_NEEDED, OK, Check, exit_status, report, run
    from disk import Need, default_needs, disk_checks
    from facts import ROOT, glibc_floor, lock_path, read_lock, read_settings
    from gpu import DRIVER, GPU, NVCC, gpu_checks, nvcc_check

PYTHON_PROBE = ("import importlib.util, platform, sys; print(platform.python_implementation(), "
                "'%d.%d' % sys.version_info[:2], importlib.util.find_spec('ensurepip') is not None)")
PLATFORM = "platform"


def python_check(version: str) -> Check:
    """The interpreter setup would make .venv-gpu with: APSFT_GPU_PYTHON, else python<version> on PATH."""
    chosen = os.environ.get("APSFT_GPU_PYTHON") or f"python{version}"
    what = f"python {version}"
    fix = (f"Ubuntu: sudo add-apt-repository ppa:deadsnakes/ppa && sudo apt install python{version} "
           f"python{version}-venv; or `uv python install {version}` and APSFT_GPU_PYTHON=$(uv python find {version}); "
           f"or set APSFT_GPU_PYTHON to a CPython {version}")
    answer = run([chosen, "-c", PYTHON_PROBE])
    if answer is None:
        return Check(FAILS, what, f"no {chosen} on PATH (nor APSFT_GPU_PYTHON): the lock is for CPython {version}",
                     fix)
    status, out = answer
    found = out.split()
    if status != 0 or len(found) != 3:
        said = (out.strip().splitlines() or ["no output"])[-1]
        return Check(FAILS, what, f"{chosen} did not run (exit {status}): {said}", fix)
    implementation, found_version, has_venv = found
    if (implementation, found_version) != ("CPython", version):
        return Check(FAILS, what, f"{chosen} is {implementation} {found_version}; the lock is for CPython {version}",
                     fix)
    if has_venv != "True":
        return Check(FAILS, what, f"{chosen} has no ensurepip, so `-m venv` cannot make .venv-gpu",
                     f"sudo apt install python{version}-venv")
    return Check(OK, what, f"{chosen} is CPython {found_version}, with venv")


def glibc_version() -> tuple[int, ...] | None:
    """This interpreter's C library, when it is glibc: (2, 35)."""
    text = os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in getattr(os, "confstr_names", {}) else ""
    name, _, version = (text or "").partition(" ")
    if name != "glibc":
        name, version = platform.libc_ver()
    try:
        return tuple(int(part) for part in version.split(".")[:2]) if name == "glibc" else None
    except ValueError:
        return None


def platform_check(platform_tag: str, found: tuple[int, ...] | None = None, system: str = "",
                   machine: str = "") -> Check:
    """Linux on the lock's architecture, glibc at or above its manylinux floor."""
    floor = glibc_floor(platform_tag)
    arch = platform_tag.split("-")[0]
    system, machine = system or platform.system(), machine or platform.machine()
    needs = f"the lock's floor: Linux {arch}, glibc {floor[0]}.{floor[1]} ({platform_tag})"
    fix = "a Linux x86-64 host on Ubuntu 20.04, Debian 11 or newer (scripts/gpu_settings.sh says why the floor)"
    if (system, machine) != ("Linux", arch):
        return Check(FAILS, PLATFORM, f"{system} {machine}; {needs}", fix)
    found = glibc_version() if found is None else found
    if found is None:
        return Check(FAILS, PLATFORM, f"no glibc found (musl?); {needs}", fix)
    shown = ".".join(map(str, found))
    if found < floor:
        return Check(FAILS, PLATFORM, f"glibc {shown} is older than the floor; {needs}", fix)
    return Check(OK, PLATFORM, f"Linux {machine}, glibc {shown}; {needs}")


def check_host(root: Path = ROOT, *, needs: list[Need] | None = None, not_needed: str = "",
               setup: bool = False) -> list[Check]:
    """Every host check, in order: driver, GPU, Python, platform, nvcc, then the disk per filesystem.
    `needs`: what the disk must hold (default: estimates without a profile). `not_needed`: why the GPU
    environment is not needed at all (a CPU profile), which its lines say instead."""
    disk = disk_checks(default_needs(root, setup) if needs is None else needs)
    settings = read_settings(root)
    if not_needed:
        gpu_lines = (DRIVER, GPU, f"python {settings['GPU_PYTHON_VERSION']}", PLATFORM, NVCC)
        return [Check(NOT_NEEDED, what, not_needed) for what in gpu_lines] + disk
    python = [python_check(settings["GPU_PYTHON_VERSION"]), platform_check(settings["GPU_PLATFORM"])]
    path = lock_path(root)
    lock = read_lock(path)
    if lock is None:
        return [Check(FAILS, "GPU lock", f"{path} is absent or names no CUDA release (no cuda-toolkit pin, no "
                                         "nvidia-*-cuNN wheels)", "git checkout requirements/gpu.lock, or run "
                                                                  "bash scripts/lock_gpu.sh")] + python + disk
    return gpu_checks(lock) + python + [nvcc_check(lock)] + disk


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 apsft_dagster/core/doctor/host.py",
                                     description="check this machine for the GPU environment; exit 1 on any FAILS")
    parser.add_argument("--setup", action="store_true",
                        help="as `bash scripts/setup.sh gpu` runs it: of the disk, only the environment's share is "
                             "required (the snapshot and the merged models warn)")
    args = parser.parse_args(argv)
    checks = check_host(setup=args.setup)
    print(report(checks), end="")
    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
