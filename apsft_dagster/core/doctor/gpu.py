"""The NVIDIA driver and the GPUs, as nvidia-smi reports them, against the driver floor of the lock's
CUDA major; and nvcc, which causal-conv1d (the lock's one sdist) compiles with. Standard library,
Python 3.9+."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

if __package__:
    from apsft_dagster.core.doctor.check import FAILS, OK, SKIPPED, WARN, Check, run
    from apsft_dagster.core.doctor.facts import Lock, version_tuple
else:  # run as a file by setup, before any venv (core/doctor/__init__.py says why)
    from check import FAILS, OK, SKIPPED, WARN, Check, run
    from facts import Lock, version_tuple

DRIVER, GPU, NVCC = "nvidia driver", "GPU", "nvcc"
QUERY = ["nvidia-smi", "--query-gpu=driver_version,name,memory.total", "--format=csv,noheader,nounits"]
WITHOUT_GPU = "APSFT_GPU_WITHOUT_GPU"


def driver_ways_out(lock: Lock, floor: str) -> str:
    """What to do on a driver below the floor; a lock for an older CUDA is not one of them."""
    series = floor.split(".")[0]
    return (f"upgrade the driver to the {series} series or newer (Ubuntu: nvidia-driver-{series}-server), then "
            f"reboot; or, on a data-center GPU, NVIDIA's forward-compatibility package cuda-compat-{lock.release('-')} "
            f"(from NVIDIA's CUDA repository, with /usr/local/cuda-{lock.release()}/compat first on LD_LIBRARY_PATH; "
            f"NVIDIA's CUDA Compatibility guide lists the older driver branches it supports); or a host image with "
            f"a {series}+ driver. "
            f"A lock for an older CUDA is no way out: PyPI's torch {lock.pins.get('torch', '?')} and vllm "
            f"{lock.pins.get('vllm', '?')} are CUDA {lock.cuda_major} builds only (docs/vllm.md#why-no-cuda-12-lock)")


def driver_check(found: str, lock: Lock) -> Check:
    """The driver nvidia-smi reports against the floor of the lock's CUDA major."""
    floor = lock.driver_floor()
    needs = f"the floor of CUDA {lock.cuda_major} ({lock.source})"
    if floor is None:
        return Check(FAILS, DRIVER, f"{found}; the lock is built for {lock.cuda} ({lock.source}), whose driver floor "
                                    "doctor does not know",
                     "add it to DRIVER_FLOORS in apsft_dagster/core/doctor/facts.py from NVIDIA's CUDA release notes")
    try:
        older = version_tuple(found) < version_tuple(floor)
    except ValueError:
        return Check(FAILS, DRIVER, f"nvidia-smi reports driver version {found!r}, which is not a version",
                     "check the driver's installation (nvidia-smi alone should list the GPUs)")
    if older:
        return Check(FAILS, DRIVER, f"{found} is older than {floor}, {needs}: torch.cuda.is_available() would be "
                                    "False", driver_ways_out(lock, floor))
    return Check(OK, DRIVER, f"{found}, at least {floor}, {needs}")


def gpus_check(rows: list[tuple[str, str, str]]) -> Check:
    """Each GPU's model and memory (reported, not judged)."""
    seen = {}
    for _, name, memory in rows:
        label = f"{name}, {memory} MiB" if memory.isdigit() else f"{name}, memory {memory}"
        seen[label] = seen.get(label, 0) + 1
    return Check(OK, GPU, "; ".join(f"{count} x {label}" for label, count in seen.items()))


def parse_query(text: str) -> list[tuple[str, str, str]]:
    """(driver, name, memory) per line of the CSV QUERY asks for (a name may hold commas)."""
    rows = []
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) >= 3 and parts[0]:
            rows.append((parts[0], ", ".join(parts[1:-1]), parts[-1]))
    return rows


def gpu_checks(lock: Lock) -> list[Check]:
    """Two lines: the driver against the floor, and the GPUs; skipped for an image build."""
    if os.environ.get(WITHOUT_GPU) == "1":
        why = f"image build ({WITHOUT_GPU}=1); run doctor again on the GPU machine"
        return [Check(SKIPPED, DRIVER, why), Check(SKIPPED, GPU, why)]
    floor = lock.driver_floor() or "?"
    answer = run(QUERY)
    if answer is None:
        return [Check(FAILS, DRIVER, "no nvidia-smi on PATH: no NVIDIA driver here, or not a CUDA machine",
                      f"install an NVIDIA driver {floor} or newer; an image build without a GPU sets {WITHOUT_GPU}=1"),
                Check(FAILS, GPU, "none seen (no nvidia-smi)")]
    status, out = answer
    rows = parse_query(out) if status == 0 else []
    if not rows:
        said = (out.strip().splitlines() or ["no output"])[0]
        return [Check(FAILS, DRIVER, f"nvidia-smi failed (exit {status}): {said}",
                      f"nvidia-smi alone must list the GPUs: reinstall or reload the driver ({floor} or newer)"),
                Check(FAILS, GPU, "none seen")]
    return [driver_check(rows[0][0], lock), gpus_check(rows)]


def find_nvcc() -> tuple[Path | None, str]:
    """The nvcc of the CUDA toolkit an extension build should take, and how it was found: CUDA_HOME or
    CUDA_PATH, then /usr/local/cuda, then PATH; (None, where it was looked for) when there is none.
    torch's own guess looks at PATH before /usr/local/cuda and takes the folder above PATH's nvcc, which
    for a /usr/local/bin/nvcc wrapper script is /usr/local, no toolkit: setup therefore builds with
    CUDA_HOME set to `toolkit_home` of this nvcc."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            found = Path(os.environ[var]) / "bin" / "nvcc"
            return (found, var) if found.is_file() else (None, f"{var}={os.environ[var]} has no bin/nvcc")
    default = Path("/usr/local/cuda/bin/nvcc")
    if default.is_file():
        return default, "/usr/local/cuda"
    on_path = shutil.which("nvcc")
    return (Path(on_path), "PATH") if on_path else (None, "not in /usr/local/cuda nor on PATH")


def toolkit_home(nvcc: Path) -> Path:
    """The toolkit folder of an nvcc: the folder above its bin/ (symbolic links followed)."""
    return nvcc.resolve().parent.parent


def nvcc_release(nvcc: Path) -> tuple[int, int] | None:
    """(major, minor) of the CUDA release `nvcc --version` names; None when it names none or does not run."""
    answer = run([str(nvcc), "--version"])
    found = re.search(r"release (\d+)\.(\d+)", answer[1]) if answer else None
    return (int(found.group(1)), int(found.group(2))) if found else None


def nvcc_check(lock: Lock) -> Check:
    """A warning, not a failure, where nvcc is absent or of another CUDA major than the lock's."""
    needs = (f"causal-conv1d (the lock's one sdist) needs nvcc of CUDA {lock.cuda_major} to build, unless its "
             "setup.py finds a prebuilt wheel; without it a CUDA run of Qwen3.5 stops before any GPU work unless the "
             "profile sets gpu.reference_kernels: true (core/kernels.py). FlashInfer's JIT (vLLM's Gated DeltaNet "
             "prefill on SM90) compiles with nvcc too")
    fix = (f"install CUDA {lock.cuda_major}'s compiler (NVIDIA's CUDA repository: cuda-nvcc-{lock.release('-')}) and "
           f"set CUDA_HOME to its toolkit folder (/usr/local/cuda-{lock.release()})")
    nvcc, where = find_nvcc()
    if nvcc is None:
        return Check(WARN, NVCC, f"none ({where}): {needs}", fix)
    release = nvcc_release(nvcc)
    if release is None:
        return Check(WARN, NVCC, f"{nvcc} --version names no CUDA release: {needs}", fix)
    major, minor = release
    if major != lock.cuda_major:
        return Check(WARN, NVCC, f"{nvcc} is CUDA {major}.{minor}, the lock's torch is {lock.cuda}: {needs}", fix)
    return Check(OK, NVCC, f"{nvcc} is CUDA {major}.{minor} (found by {where}), the lock's major")
