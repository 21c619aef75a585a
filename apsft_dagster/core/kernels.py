"""Qwen3.5's linear-attention kernels on CUDA: importable, or a stop before any GPU work.

transformers (5.19 and 5.24 alike: integrations/hub_kernels.py, `use_kernel_func_from_hub_with_fallback`)
chooses, once, when modeling_qwen3_5 is imported, what each of a Gated DeltaNet layer's four kernels
runs: it imports the package (`fla`, `causal_conv1d`), takes the function from it (for fla, from
`fla.ops.gated_delta_rule` when the root lacks it), and on any exception at all runs its reference
PyTorch function instead, with a warning (core/kernel_notice.py makes that one line). On CPU that
path is the only one, and correct. On CUDA it would hide a broken install behind a run ~10x slower,
which the budget gate would then price as the machine's speed. So on CUDA, for a model with
linear-attention layers, `require_kernels` replays transformers' lookup and stops, naming the
package, its import error and the fix, unless the profile chose the slow path
(`gpu: {reference_kernels: true}`, core/config/sections/gpu.py). A model without them (Qwen3) needs neither.
"""

from __future__ import annotations

import functools
import importlib
import json
import subprocess
import sys
from collections.abc import Callable

from apsft_dagster.core.config import Compute, Config, Gpu
from apsft_dagster.core.errors import KernelError, ModelDirectoryError
from apsft_dagster.core.kernel_notice import say_instead
from apsft_dagster.core.paths import local_model_dir
from apsft_dagster.core.snapshot import has_linear_attention_layers

# distribution -> (import name, the submodule transformers also looks in, the functions Qwen3.5's layers take)
KERNELS = {
    "flash-linear-attention": ("fla", "ops.gated_delta_rule",
                               ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule")),
    "causal-conv1d": ("causal_conv1d", None, ("causal_conv1d_fn", "causal_conv1d_update")),
}
SETUP = "bash scripts/setup.sh gpu"
FIX = {
    "flash-linear-attention": f"run `{SETUP}` (it installs flash-linear-attention from requirements/gpu.lock)",
    "causal-conv1d": "it is compiled against the installed torch, whose CUDA is 13: point CUDA_HOME at a CUDA 13 "
                     f"toolkit with nvcc (export CUDA_HOME=/usr/local/cuda-13.0 or wherever it lies), then rerun "
                     f"`{SETUP}`",
}
SWITCH = "gpu: {reference_kernels: true}"
CHOSEN = ("apsft: Qwen3.5's linear-attention layers run transformers' reference PyTorch kernels on CUDA, as the "
          "profile chose (gpu.reference_kernels: true; {packages} not importable here): correct, ~10x slower")
PROBE = "import json; from apsft_dagster.core.kernels import import_errors; print(json.dumps(import_errors()))"


def import_errors() -> dict[str, str]:
    """{distribution: why transformers would not find one of its functions} in this interpreter; {} when
    every one imports. The lookup is transformers' own, and any exception counts, as it does there."""
    found = {}
    for distribution, (package, submodule, names) in KERNELS.items():
        for name in names:
            try:
                module = importlib.import_module(package)
                if getattr(module, name, None) is None and submodule is not None:
                    module = importlib.import_module(f"{package}.{submodule}")
                if getattr(module, name, None) is None:
                    raise ImportError(f"{module.__name__} has no {name}")
            except Exception as exc:  # transformers falls back on any exception (hub_kernels.py)
                found[distribution] = f"{type(exc).__name__}: {exc}"
                break
    return found


@functools.cache
def probe_in_child() -> dict[str, str]:
    """`import_errors()` in a fresh interpreter like this one: what a stage's process will find, with
    nothing imported here (a kernel package asks CUDA for the device on import, and the caller may be
    the run's parent, which leaves the GPU to its stages). An interpreter the import kills (a broken
    compiled module can) counts against both packages."""
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {name: f"importing the kernel packages ended the interpreter (exit {proc.returncode}): {last}"
            for name in KERNELS}


def has_linear_attention(config: Config) -> bool:
    """Whether the profile's base model (and so each model merged from it) has linear-attention layers:
    the embedded build's layout, or the `layer_types` of the local snapshot's (text) config."""
    if config.model.source == "embedded":
        return config.model.architecture == "qwen3_5" and config.embedded.linear_attention.full_attention_interval > 1
    path = local_model_dir(config.model.path) / "config.json"
    if not path.is_file():
        raise ModelDirectoryError(f"{path}: no such file; point model.path (or APSFT_MODEL_DIR) at the snapshot")
    return has_linear_attention_layers(json.loads(path.read_text()))


def require_kernels(compute: Compute, linear_attention: bool, gpu: Gpu | None, stage: str,
                    probe: Callable[[], dict[str, str]] | None = None) -> None:
    """Nothing on CPU, or for a model without linear-attention layers. On CUDA: KernelError naming each
    kernel package that does not import as transformers imports it (`probe`, by default
    `probe_in_child`: {distribution: error}), unless the profile allows the reference kernels; then
    one line, once a process, says so."""
    if compute.device != "cuda" or not linear_attention:
        return
    missing = (probe or probe_in_child)()
    if not missing:
        return
    if gpu is not None and gpu.reference_kernels:
        say_instead(CHOSEN.format(packages=" and ".join(sorted(missing))))
        return
    lines = "\n".join(f"  {name}: {error}\n    fix: {FIX[name]}" for name, error in sorted(missing.items()))
    raise KernelError(
        f"stage {stage} runs a model with linear-attention layers (Qwen3.5) on CUDA, whose kernels do not import "
        f"as transformers imports them:\n{lines}\ntransformers would fall back to its reference PyTorch kernels, "
        "~10x slower, and the budget gate would price training at that speed; nothing was loaded or written. "
        f"To run on the reference kernels anyway, set `{SWITCH}` in the profile")
