"""CPU kernels pinned so float results are the same bytes on every x86-64 machine with AVX2.

Three libraries pick their code path from the CPU they find: ATen's vectorized kernels
(`ATEN_CPU_CAPABILITY`), MKL's BLAS (`MKL_CBWR`, conditional numerical reproducibility) and
oneDNN (`ONEDNN_MAX_CPU_ISA`). An AVX-512 machine would otherwise sum in other orders than an
AVX2-only one and write other bits. Each reads its setting once, when first used, so
`pin_cpu_kernels()` runs when the package is imported (before any torch work), and
`check_cpu_kernels()` refuses a model-holding process where torch already chose another path.
The thread count is pinned separately from the profile (`compute.threads`).

`APSFT_CPU_KERNELS=native` leaves the libraries to choose (faster on AVX-512, same bytes only on
the same kind of CPU).

Transformers' hub-kernel fallback is pinned off as well, on every machine and profile (`full`'s
GPU runs above all): with the `kernels` package installed it would fetch compiled kernels from the
Hugging Face hub at run time, and run code the lock (requirements/gpu.lock) never named.
`USE_HUB_KERNELS` is read once, when transformers' hub-kernels module is imported.
"""

from __future__ import annotations

import os
import platform

SWITCH = "APSFT_CPU_KERNELS"
PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
          "DNNL_MAX_CPU_ISA": "AVX2"}


def pinning() -> bool:
    """Whether this process pins the kernels: an x86-64 CPU with AVX2, and not opted out."""
    return os.environ.get(SWITCH, "pinned") != "native" and _has_avx2()


def _has_avx2() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo") as fh:
            return any(line.startswith("flags") and " avx2" in line for line in fh)
    except OSError:  # not Linux: x86-64 machines of the last decade have it
        return True


HUB_KERNELS = {"USE_HUB_KERNELS": "NO"}


def pin_hub_kernels() -> None:
    """Transformers' `kernels` hub fallback off, whatever the environment says."""
    os.environ.update(HUB_KERNELS)


def check_hub_kernels() -> None:
    """RuntimeError when transformers was imported with its hub kernels on (before this package)."""
    import sys

    module = sys.modules.get("transformers.integrations.hub_kernels")  # it reads the variable on import
    if module is not None and getattr(module, "_TRANSFORMERS_USE_HUB_KERNELS", "NO") != HUB_KERNELS["USE_HUB_KERNELS"]:
        raise RuntimeError("transformers was imported with its hub kernels on (USE_HUB_KERNELS), before "
                           "apsft_dagster: it could fetch kernels at run time. Import apsft_dagster first, or "
                           "export USE_HUB_KERNELS=NO")


def pin_cpu_kernels() -> None:
    """Set the three libraries' ISA settings in this process's environment (and so its children's)."""
    if pinning():
        os.environ.update(PINNED)


def kernel_settings() -> dict[str, str]:
    """What a build's bytes depend on besides the code and the thread count (for cache keys).
    Pinned, the capability is the pin (the build checks it: `check_cpu_kernels`), so a cache hit
    needs no torch import; unpinned, it is whatever torch chose on this machine."""
    if pinning():
        capability = PINNED["ATEN_CPU_CAPABILITY"].upper()
    else:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
    return {"pinned": str(pinning()), "aten_cpu_capability": capability,
            **{k: os.environ.get(k, "") for k in sorted(PINNED)}}


def check_cpu_kernels() -> None:
    """RuntimeError when torch already runs another ATen capability than the pinned one, or transformers
    its hub kernels (`check_hub_kernels`): it was imported and used before this package set it (import
    apsft_dagster first)."""
    check_hub_kernels()
    if not pinning():
        return
    import torch

    found = torch.backends.cpu.get_cpu_capability()
    if found.lower() != PINNED["ATEN_CPU_CAPABILITY"]:
        raise RuntimeError(
            f"torch runs its {found} CPU kernels, not the pinned {PINNED['ATEN_CPU_CAPABILITY'].upper()}: it chose "
            f"them before apsft_dagster was imported. Import apsft_dagster before torch (or export "
            f"ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2), or set {SWITCH}=native to accept "
            "results that are byte-identical on this kind of CPU only")
