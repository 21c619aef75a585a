"""A CUDA toolkit folder as a build sees it, for the tests that find nvcc (setup's causal-conv1d step,
the vLLM JIT's choice): `bin/nvcc` answering `--version` with a release, or no nvcc at all."""

from pathlib import Path


def cuda_home(folder: Path, release: str | None) -> Path:
    """folder/bin/nvcc reporting `release` ("13.0"), or an empty bin/ when release is None."""
    (folder / "bin").mkdir(parents=True)
    if release:
        nvcc = folder / "bin" / "nvcc"
        nvcc.write_text(f'#!/bin/sh\necho "Cuda compilation tools, release {release}, V{release}.88"\n')
        nvcc.chmod(0o755)
    return folder
