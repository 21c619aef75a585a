"""The CPU kernels are pinned in every process that imports the package, whatever its environment
asks for: a child told to use ATen's `default` kernels still computes the parent's bits, and
only with the opt-out does it compute others (so the pin is what holds them)."""

import hashlib
import os
import subprocess
import sys

import pytest
import torch

from apsft_dagster.core.determinism import PINNED, SWITCH, check_cpu_kernels, pinning
from tiny import tiny_snapshot

FORWARD = """
import hashlib, sys
import apsft_dagster
import torch
from transformers import AutoModelForCausalLM
torch.set_num_threads(1)
model = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()
with torch.no_grad():
    logits = model(input_ids=torch.arange(5, 290)[None]).logits
print(torch.backends.cpu.get_cpu_capability(), hashlib.sha256(logits.numpy().tobytes()).hexdigest())
"""


def _child(snapshot, **env) -> tuple[str, str]:
    clean = {k: v for k, v in os.environ.items() if k not in (*PINNED, SWITCH)}
    out = subprocess.run([sys.executable, "-c", FORWARD, str(snapshot)], env={**clean, **env}, check=True,
                         capture_output=True, text=True).stdout.split()
    return out[0], out[1]


@pytest.mark.slow
@pytest.mark.skipif(not pinning(), reason="the pin applies to x86-64 CPUs with AVX2 only (none here)")
def test_a_child_asking_for_other_kernels_still_computes_the_pinned_bits(tmp_path):
    from transformers import AutoModelForCausalLM

    snapshot = tiny_snapshot(tmp_path / "model", "qwen3_5", layers=2)
    check_cpu_kernels()  # this process: pinned since conftest imported the package
    torch.set_num_threads(1)
    with torch.no_grad():
        logits = AutoModelForCausalLM.from_pretrained(snapshot).eval()(input_ids=torch.arange(5, 290)[None]).logits
    here = hashlib.sha256(logits.numpy().tobytes()).hexdigest()
    assert _child(snapshot, ATEN_CPU_CAPABILITY="default") == ("AVX2", here)
    capability, native = _child(snapshot, ATEN_CPU_CAPABILITY="default", **{SWITCH: "native"})
    assert capability == "DEFAULT" and native != here


def test_a_process_whose_torch_chose_other_kernels_is_refused():
    code = ("import os, torch; torch.backends.cpu.get_cpu_capability(); import apsft_dagster;"
            "from apsft_dagster.core.determinism import check_cpu_kernels; check_cpu_kernels()")
    env = {**{k: v for k, v in os.environ.items() if k not in (*PINNED, SWITCH)}, "ATEN_CPU_CAPABILITY": "default"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if not pinning():
        assert proc.returncode == 0
        return
    assert proc.returncode != 0 and "torch runs its DEFAULT CPU kernels, not the pinned AVX2" in proc.stderr


@pytest.mark.slow
def test_transformers_hub_kernels_stay_off_whatever_the_environment_says():
    """`full` runs with transformers' `kernels` hub fallback pinned off (core/determinism.py): asked for
    with USE_HUB_KERNELS=YES, it is still off once the package is imported first, and a process that
    imported transformers before the package is refused before it holds a model."""
    env = {**os.environ, "USE_HUB_KERNELS": "YES"}
    first = "import apsft_dagster, transformers.integrations.hub_kernels as h; print(h._TRANSFORMERS_USE_HUB_KERNELS)"
    assert subprocess.run([sys.executable, "-c", first], env=env, capture_output=True, text=True,
                          check=True).stdout.split()[-1] == "NO"
    late = ("import transformers.integrations.hub_kernels as h; import apsft_dagster;"
            "from apsft_dagster.core.determinism import check_cpu_kernels; check_cpu_kernels()")
    proc = subprocess.run([sys.executable, "-c", late], env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "imported with its hub kernels on (USE_HUB_KERNELS)" in proc.stderr
