"""Qwen3.5's kernels on CUDA (core/kernels.py): a missing or broken flash-linear-attention or
causal-conv1d stops a CUDA run before any GPU work, naming the package, its import error and the fix,
unless the profile chose the reference kernels; a CPU, or a model without linear attention, is not
checked. "Importable" is judged against transformers' own choice on the same fake packages."""

import logging
import sys

import pytest

from apsft_dagster import cli
from apsft_dagster.core import kernel_notice, kernels
from apsft_dagster.core.config import Gpu, load_config
from apsft_dagster.core.engines.lifetime import preflight
from apsft_dagster.core.errors import KernelError
from apsft_dagster.core.kernels import KERNELS, has_linear_attention, import_errors, probe_in_child, require_kernels

UNDEFINED = ("/venv/lib/python3.11/site-packages/causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so: undefined "
             "symbol: _ZN3c104cuda9SetDeviceEab")  # a wheel built against another torch
CHUNK = "def chunk_gated_delta_rule(*a, **k):\n    return 'kernel'\n"
OPS = CHUNK + "\n\ndef fused_recurrent_gated_delta_rule(*a, **k):\n    return 'kernel'\n"
# as fla 0.6 lays them out: the functions in fla.ops.gated_delta_rule, not on the package root
FLA = {"fla/__init__.py": "", "fla/ops/__init__.py": "", "fla/ops/gated_delta_rule/__init__.py": OPS}
CONV = {"causal_conv1d/__init__.py": "from causal_conv1d.cpp_functions import causal_conv1d_fn, "
                                     "causal_conv1d_update\n",
        "causal_conv1d/cpp_functions.py": "def causal_conv1d_fn(*a, **k):\n    return 'kernel'\n\n\n"
                                          "def causal_conv1d_update(*a, **k):\n    return 'kernel'\n"}
# where causal_conv1d.cpp_functions runs `import causal_conv1d_cuda`, the compiled extension
BROKEN_CONV = {**CONV, "causal_conv1d/cpp_functions.py": f"raise ImportError({UNDEFINED!r})\n"}
SCENARIOS = {
    "neither installed": {},
    "both import": {**FLA, **CONV},
    "causal-conv1d's compiled module broken": {**FLA, **BROKEN_CONV},
    "fla without its recurrent kernel": {**FLA, "fla/ops/gated_delta_rule/__init__.py": CHUNK, **CONV},
    "fla failing on import, not with an ImportError": {**FLA, "fla/__init__.py": "raise RuntimeError(1)\n", **CONV},
}


def cuda():
    return load_config("smoke").compute.model_copy(update={"device": "cuda", "dtype": "bfloat16"})


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder first on sys.path to plant packages in; whatever was imported from it is forgotten after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [n for n in sys.modules if n.split(".")[0] in ("fla", "causal_conv1d")]:
        del sys.modules[name]


def plant(root, files: dict[str, str]) -> None:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)


def falls_back(func_name: str, package: str) -> bool:
    """transformers' own choice for one kernel (the decorator modeling_qwen3_5 applies)."""
    from transformers.integrations.hub_kernels import use_kernel_func_from_hub_with_fallback

    return use_kernel_func_from_hub_with_fallback(func_name, package)(lambda: "reference")() == "reference"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_package_counts_as_missing_exactly_where_transformers_falls_back(site, scenario):
    plant(site, SCENARIOS[scenario])
    theirs = {name for name, (package, _, funcs) in KERNELS.items() if any(falls_back(f, package) for f in funcs)}
    assert set(import_errors()) == theirs
    expected = {"neither installed": set(KERNELS), "both import": set(),
                "causal-conv1d's compiled module broken": {"causal-conv1d"}}
    assert theirs == expected.get(scenario, {"flash-linear-attention"})


def test_a_missing_fla_on_cuda_is_refused_naming_it_and_the_fix(site):
    plant(site, CONV)
    with pytest.raises(KernelError) as refused:
        require_kernels(cuda(), True, None, "training", probe=import_errors)
    said = str(refused.value)
    assert "flash-linear-attention: ModuleNotFoundError: No module named 'fla'" in said
    assert "`bash scripts/setup.sh gpu`" in said and "gpu: {reference_kernels: true}" in said
    assert "stage training" in said and "nothing was loaded or written" in said and "causal-conv1d:" not in said


def test_a_broken_causal_conv1d_is_refused_naming_it_its_error_and_the_cuda_13_build(site):
    plant(site, {**FLA, **BROKEN_CONV})
    with pytest.raises(KernelError) as refused:
        require_kernels(cuda(), True, Gpu(), "scoring", probe=import_errors)
    said = str(refused.value)
    assert f"causal-conv1d: ImportError: {UNDEFINED}" in said
    assert "CUDA_HOME" in said and "CUDA 13" in said and "`bash scripts/setup.sh gpu`" in said
    assert "flash-linear-attention:" not in said


def test_the_switch_runs_the_reference_kernels_and_says_so_once_instead_of_the_cpu_notice(monkeypatch, capsys):
    notice = next(f for f in logging.getLogger(kernel_notice.LOGGER).filters if isinstance(f, kernel_notice._OneNotice))
    monkeypatch.setattr(notice, "said", False)
    for _ in range(2):
        require_kernels(cuda(), True, Gpu(reference_kernels=True), "training",
                        probe=lambda: {"causal-conv1d": f"ImportError: {UNDEFINED}"})
    logging.getLogger(kernel_notice.LOGGER).warning(f"`causal_conv1d_fn` {kernel_notice.FALLBACK} because ...")
    err = capsys.readouterr().err
    assert err.count("as the profile chose (gpu.reference_kernels: true; causal-conv1d not importable here)") == 1
    assert kernel_notice.NOTICE not in err and kernel_notice.FALLBACK not in err


def never():
    raise AssertionError("the kernels were probed")


def test_a_cpu_or_a_model_without_linear_attention_is_not_checked():
    require_kernels(cuda(), False, None, "training", probe=never)
    require_kernels(load_config("smoke").compute, True, None, "training", probe=never)
    with pytest.raises(KernelError):  # the control: the same probe is asked where it counts
        require_kernels(cuda(), True, Gpu(reference_kernels=False), "training", probe=lambda: {"causal-conv1d": "x"})


def test_linear_attention_is_read_from_the_snapshot_or_the_embedded_layout(tmp_path, monkeypatch):
    from apsft_dagster.core.embedded.layout import layer_types

    smoke = load_config("smoke")
    assert has_linear_attention(smoke) == ("linear_attention" in layer_types(smoke.embedded)) is True
    qwen3 = smoke.model_copy(update={"model": smoke.model.model_copy(update={"architecture": "qwen3"})})
    assert has_linear_attention(qwen3) is False
    for name, text, expected in (
            ("qwen3_5", '{"text_config": {"layer_types": ["linear_attention", "full_attention"]}}', True),
            ("qwen3", '{"model_type": "qwen3", "num_hidden_layers": 2}', False)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(text)
        monkeypatch.setenv("APSFT_MODEL_DIR", str(tmp_path / name))
        assert has_linear_attention(load_config("full")) is expected


@pytest.fixture
def fake_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # full's 8 threads stay out of this process


def test_the_preflight_checks_a_qwen3_5_snapshot_on_cuda_and_not_a_qwen3_one(tmp_path, monkeypatch, fake_cuda):
    (tmp_path / "config.json").write_text('{"model_type": "qwen3", "num_hidden_layers": 2}')
    monkeypatch.setenv("APSFT_MODEL_DIR", str(tmp_path))
    monkeypatch.setattr(kernels, "probe_in_child", never)
    preflight(load_config("full"), "training")
    (tmp_path / "config.json").write_text('{"text_config": {"layer_types": ["linear_attention"]}}')
    monkeypatch.setattr(kernels, "probe_in_child", lambda: {"flash-linear-attention": "ModuleNotFoundError: x"})
    with pytest.raises(KernelError, match="stage training"):
        preflight(load_config("full"), "training")


def test_apsft_run_full_with_a_broken_kernel_writes_nothing(tmp_path, monkeypatch, capsys, fake_cuda):
    for name in ("APSFT_PROFILE", "APSFT_CONFIG", "APSFT_STORE_DIR", "DAGSTER_HOME"):
        monkeypatch.setenv(name, "")  # recorded, so whatever the CLI exports is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setenv("APSFT_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"text_config": {"layer_types": ["linear_attention"]}}')
    monkeypatch.setenv("APSFT_MODEL_DIR", str(tmp_path / "model"))
    monkeypatch.setattr(kernels, "probe_in_child", lambda: {"causal-conv1d": f"ImportError: {UNDEFINED}"})
    store = tmp_path / "store"
    assert cli.main(["run", "--profile", "full", "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "stage trace_bank_job" in err and f"causal-conv1d: ImportError: {UNDEFINED}" in err
    assert not store.exists() and not (tmp_path / "state").exists()


def test_the_probe_runs_in_a_fresh_interpreter_and_survives_one_the_import_kills(site, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(site))
    plant(site, {**FLA, **BROKEN_CONV})
    assert probe_in_child.__wrapped__() == {"causal-conv1d": f"ImportError: {UNDEFINED}"}
    assert "causal_conv1d" not in sys.modules  # nothing was imported here
    plant(site, {"causal_conv1d/__init__.py": "import os\nos._exit(139)  # as a segfaulting extension would\n"})
    killed = probe_in_child.__wrapped__()
    assert set(killed) == set(KERNELS) and all("ended the interpreter (exit 139)" in e for e in killed.values())
