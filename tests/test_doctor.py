"""`apsft doctor` (core/doctor/): each requirement refused by name on a host or snapshot made to miss it.

The host checks run as setup runs them, `python3 apsft_dagster/core/doctor/host.py --setup`, in a
copy of the project's doctor files, lock and settings, with fake `nvidia-smi`, `nvcc` and
`python3.11` first (and alone) on PATH; once under Python 3.9. The snapshot checks read a snapshot
written here with the safetensors library and huggingface_hub's own download records.
"""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from apsft_dagster.cli import main
from apsft_dagster.core.doctor import disk, facts
from apsft_dagster.core.doctor.check import FAILS, NOT_NEEDED, OK, SKIPPED, WARN
from apsft_dagster.core.doctor.host import platform_check
from apsft_dagster.core.doctor.snapshot import check_snapshot
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.selection.arms import ARMS

PY39 = Path("/root/.pyenv/versions/3.9.18/bin/python")
H100 = "NVIDIA H100 80GB HBM3, 81559"
REVISION = "851bf6e806efd8d0a36b00ddf55e13ccb7b8cd0a"


def fake_bin(tmp_path: Path, driver: str | None = "580.95.05", nvcc: str | None = "13.0",
             python: str | None = "CPython 3.11 True") -> Path:
    """nvidia-smi answering doctor's query (and nothing else), nvcc of a release, python3.11 printing
    what doctor's probe prints; None leaves the program out."""
    folder = tmp_path / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    query = "--query-gpu=driver_version,name,memory.total"
    scripts = {"nvidia-smi": driver and f'[ "$1" = "{query}" ] || exit 9\necho "{driver}, {H100}"',
               "nvcc": nvcc and f'echo "Cuda compilation tools, release {nvcc}, V{nvcc}.88"',
               "python3.11": python and f'echo "{python}"'}
    for name, body in scripts.items():
        if body:
            (folder / name).write_text(f"#!/bin/sh\n{body}\n")
            (folder / name).chmod(0o755)
    return folder


def project(tmp_path: Path, lock: str | None = None) -> Path:
    """The doctor's files, settings and lock (or `lock`) in a tree of their own, .venv-gpu made: `--setup`
    then requires no disk, so the exit status is the host checks'."""
    root = tmp_path / "project"
    shutil.copytree(PROJECT_ROOT / "apsft_dagster" / "core" / "doctor", root / "apsft_dagster" / "core" / "doctor",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "scripts").mkdir()
    shutil.copy(PROJECT_ROOT / "scripts" / "gpu_settings.sh", root / "scripts")
    (root / "requirements").mkdir()
    (root / "requirements" / "gpu.lock").write_text(lock or (PROJECT_ROOT / "requirements" / "gpu.lock").read_text())
    (root / ".venv-gpu").mkdir()
    return root


def host(tmp_path: Path, python: Path = Path(sys.executable), lock: str | None = None, bin_dir: Path | None = None,
         **env: str) -> tuple[int, dict]:
    """Setup's command line in a fresh process, PATH only the fake programs (`bin_dir`, default all
    passing) and CUDA_HOME their parent: (exit status, {requirement: its line})."""
    root, bin_dir = project(tmp_path, lock), bin_dir or fake_bin(tmp_path)
    env = {"PATH": str(bin_dir), "CUDA_HOME": str(bin_dir.parent), **env}
    proc = subprocess.run([str(python), str(root / "apsft_dagster/core/doctor/host.py"), "--setup"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.stderr == "" and proc.stdout.splitlines()[-1].startswith("doctor: "), proc.stderr
    lines = {line[11:].split(":")[0]: line for line in proc.stdout.splitlines()[:-1]}
    return proc.returncode, lines


def test_a_passing_host_exits_0_with_one_line_per_requirement(tmp_path):
    status, lines = host(tmp_path)
    assert status == 0, lines
    assert lines["nvidia driver"] == ("ok         nvidia driver: 580.95.05, at least 580.65.06, the floor of CUDA 13 "
                                      "(cuda-toolkit==13.0.3.0 in gpu.lock)")
    assert lines["GPU"] == "ok         GPU: 1 x NVIDIA H100 80GB HBM3, 81559 MiB"
    assert lines["python 3.11"] == "ok         python 3.11: python3.11 is CPython 3.11, with venv"
    assert lines["nvcc"].startswith(f"ok         nvcc: {tmp_path / 'bin' / 'nvcc'} is CUDA 13.0")
    assert lines["platform"].startswith("ok         platform: Linux x86_64, glibc 2.")
    assert list(lines)[-1].startswith("disk at ")


@pytest.mark.parametrize("driver", ["535.104.05", "570.195.03"])
def test_a_driver_below_580_is_refused_naming_the_floor_and_the_ways_out(tmp_path, driver):
    status, lines = host(tmp_path, bin_dir=fake_bin(tmp_path, driver=driver))
    assert status == 1
    line = lines["nvidia driver"]
    assert line.startswith(f"FAILS      nvidia driver: {driver} is older than 580.65.06, the floor of CUDA 13 "
                           "(cuda-toolkit==13.0.3.0 in gpu.lock): torch.cuda.is_available() would be False. Fix: ")
    for way_out in ("the 580 series or newer", "forward-compatibility package cuda-compat-13-0",
                    "/usr/local/cuda-13.0/compat", "a host image with a 580+ driver", "A lock for an older CUDA"):
        assert way_out in line
    assert lines["GPU"].startswith("ok ")  # the GPU itself is seen


def test_the_driver_floor_follows_the_locks_cuda_release(tmp_path):
    """No major is written twice: a lock of CUDA 12 wheels takes CUDA 12's floor, and one that names its
    release only by the nvidia-*-cuNN wheels still yields it."""
    old = "cuda-toolkit==12.8.1 \\\n    --hash=sha256:00\nnvidia-cudnn-cu12==9.8.0.87 \\\n"
    status, lines = host(tmp_path / "a", lock=old, bin_dir=fake_bin(tmp_path / "a", driver="535.104.05"))
    assert status == 0 and "at least 525.60.13, the floor of CUDA 12 (cuda-toolkit==12.8.1 in gpu.lock)" \
        in lines["nvidia driver"]
    wheels_only = "nvidia-cudnn-cu13==9.20.0.48 \\\nnvidia-nccl-cu13==2.29.7 \\\n"
    status, lines = host(tmp_path / "b", lock=wheels_only, bin_dir=fake_bin(tmp_path / "b", driver="570.195.03"))
    assert status == 1 and "older than 580.65.06, the floor of CUDA 13 (the nvidia-*-cu13 wheels in gpu.lock)" \
        in lines["nvidia driver"]


def test_no_nvidia_smi_is_refused_unless_an_image_build(tmp_path):
    status, lines = host(tmp_path / "a", bin_dir=fake_bin(tmp_path / "a", driver=None))
    assert status == 1
    assert lines["nvidia driver"].startswith("FAILS      nvidia driver: no nvidia-smi on PATH")
    assert "APSFT_GPU_WITHOUT_GPU=1" in lines["nvidia driver"]
    status, lines = host(tmp_path / "b", bin_dir=fake_bin(tmp_path / "b", driver=None), APSFT_GPU_WITHOUT_GPU="1")
    assert status == 0
    assert lines["nvidia driver"].startswith("skipped    nvidia driver: image build (APSFT_GPU_WITHOUT_GPU=1)")
    assert lines["GPU"].startswith("skipped    GPU: image build")


def test_a_hung_nvidia_smi_is_refused_within_its_timeout(tmp_path):
    """A shell that waits on a child: the child holds the pipes, so only killing the group ends it."""
    bin_dir = fake_bin(tmp_path)
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\n/bin/sleep 60\n")
    status, lines = host(tmp_path, bin_dir=bin_dir)
    assert status == 1 and "no answer within 5 s" in lines["nvidia driver"]


@pytest.mark.parametrize(("release", "expected"), [
    ("13.0", "ok         nvcc: {nvcc} is CUDA 13.0 (found by CUDA_HOME), the lock's major"),
    ("12.4", "warn       nvcc: {nvcc} is CUDA 12.4, the lock's torch is CUDA 13.0: causal-conv1d (the lock's one "
             "sdist) needs nvcc of CUDA 13 to build"),
    (None, "warn       nvcc: none (CUDA_HOME={home} has no bin/nvcc): causal-conv1d"),
], ids=["13.0", "12.4", "none"])
def test_nvcc_of_another_major_or_none_warns_without_failing(tmp_path, release, expected):
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    if release:
        shutil.move(fake_bin(tmp_path / "x", nvcc=release) / "nvcc", home / "bin" / "nvcc")
    status, lines = host(tmp_path, bin_dir=fake_bin(tmp_path, nvcc=None), CUDA_HOME=str(home))
    assert status == 0
    assert lines["nvcc"].startswith(expected.format(nvcc=home / "bin" / "nvcc", home=home))


def test_a_missing_or_wrong_python_311_is_refused_with_the_ways_out(tmp_path):
    status, lines = host(tmp_path / "a", bin_dir=fake_bin(tmp_path / "a", python=None))
    assert status == 1
    line = lines["python 3.11"]
    assert line.startswith("FAILS      python 3.11: no python3.11 on PATH (nor APSFT_GPU_PYTHON)")
    assert all(way in line for way in ("deadsnakes", "python3.11-venv", "uv python install 3.11", "APSFT_GPU_PYTHON"))
    if PY39.exists():  # a real interpreter of another version, through APSFT_GPU_PYTHON
        status, lines = host(tmp_path / "b", APSFT_GPU_PYTHON=str(PY39))
        assert status == 1 and f"{PY39} is CPython 3.9; the lock is for CPython 3.11" in lines["python 3.11"]
    status, lines = host(tmp_path / "c", bin_dir=fake_bin(tmp_path / "c", python="CPython 3.11 False"))
    assert status == 1 and "no ensurepip" in lines["python 3.11"] and "apt install python3.11-venv" in lines[
        "python 3.11"]


@pytest.mark.skipif(not PY39.exists(), reason=f"no {PY39}")
def test_the_host_checks_run_under_python_3_9_as_under_the_venv(tmp_path):
    """Setup runs them with the system python3 (3.10 on Ubuntu 22.04, 3.9 on Debian 11)."""
    under_39, under_venv = host(tmp_path / "a", python=PY39), host(tmp_path / "b")
    assert under_39[0] == under_venv[0] == 0
    assert {k: v.replace(str(tmp_path / "a"), "") for k, v in under_39[1].items() if not k.startswith("disk")} == \
        {k: v.replace(str(tmp_path / "b"), "") for k, v in under_venv[1].items() if not k.startswith("disk")}
    status, lines = host(tmp_path / "c", python=PY39, bin_dir=fake_bin(tmp_path / "c", driver="535.104.05"))
    assert status == 1 and lines["nvidia driver"].startswith("FAILS      nvidia driver: 535.104.05 is older")


def test_glibc_and_the_platform_against_the_locks_floor():
    tag = facts.read_settings()["GPU_PLATFORM"]
    assert tag == "x86_64-manylinux_2_31"
    assert platform_check(tag, found=(2, 31), system="Linux", machine="x86_64").status == OK
    old = platform_check(tag, found=(2, 28), system="Linux", machine="x86_64")
    assert old.status == FAILS and old.why.startswith("glibc 2.28 is older than the floor")
    assert platform_check(tag, found=(2, 39), system="Darwin", machine="arm64").status == FAILS


def test_the_disk_is_summed_per_filesystem_and_replication_only_warns(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    half = free // 2 + disk.GB
    (check,) = disk.disk_checks([disk.Need("a", tmp_path / "x", half), disk.Need("b", tmp_path / "y" / "z", half)])
    assert check.status == FAILS and check.what == f"disk at {tmp_path}"  # each fits alone, not both
    (check,) = disk.disk_checks([disk.Need("a", tmp_path, disk.GB), disk.Need("b", tmp_path, free, False, "later")])
    assert check.status == WARN and "b " in check.why and "(later)" in check.why
    assert disk.disk_checks([disk.Need("a", tmp_path, disk.GB)])[0].status == OK
    assert disk.DEFAULT_POLICIES == len(ARMS)


def tokenizer_of(folder: Path) -> None:
    """A tiny real tokenizer with Qwen3's chat template (core/families), saved as a snapshot holds it."""
    from apsft_dagster.core.families.build import train_tokenizer
    from apsft_dagster.core.families.templates import FAMILIES

    train_tokenizer(FAMILIES["qwen3"], ["What is 2 + 3?", "2 + 3 = 5", "ANSWER: 5"] * 20, 280).save_pretrained(folder)


def write_snapshot(folder: Path, revision: str = REVISION) -> Path:
    """Two safetensors shards, their index, config and tokenizer, each recorded by huggingface_hub's own
    `write_download_metadata` as `hf download --local-dir` records it (LFS etag: the sha256; a plain
    file's: its git blob id)."""
    import numpy as np
    from huggingface_hub._local_folder import write_download_metadata
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    weight_map = {}
    for i in (1, 2):
        name = f"model-0000{i}-of-00002.safetensors"
        tensors = {f"layers.{i}.weight": np.arange(64, dtype=np.float32) * i,
                   f"layers.{i}.norm": np.ones(8, np.float16)}
        save_file(tensors, str(folder / name))
        weight_map.update(dict.fromkeys(tensors, name))
    small = {"config.json": {"model_type": "qwen3_5"},
             "model.safetensors.index.json": {"metadata": {}, "weight_map": weight_map}}
    for name, doc in small.items():
        (folder / name).write_text(json.dumps(doc))
    tokenizer_of(folder)  # a real one: doctor reads the text protocol from its chat template
    for path in sorted(folder.iterdir()):
        data = path.read_bytes()
        etag = (hashlib.sha256(data).hexdigest() if path.suffix == ".safetensors"
                else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest())
        write_download_metadata(folder, path.name, revision, etag)
    return folder


def statuses(checks) -> dict:
    return {c.what: c.status for c in checks}


def snapshot_checks(folder: Path, hashes: bool = True):
    return check_snapshot(folder, name="Qwen/Qwen3.5-4B", revision=REVISION, root=folder.parent, hashes=hashes)


def test_a_whole_snapshot_at_the_pinned_revision_passes_every_check(tmp_path):
    checks = snapshot_checks(write_snapshot(tmp_path / "Qwen3.5-4B"))
    assert statuses(checks) == {"snapshot files": OK, "snapshot weights": OK, "snapshot revision": OK,
                                "snapshot hashes": OK}
    assert checks[1].why.startswith("2 safetensors file(s)") and REVISION in checks[2].why
    assert checks[3].why == "2 LFS files match the sha256 `hf download` recorded"


def fix_of(folder: Path) -> str:
    command = f"hf download Qwen/Qwen3.5-4B --revision {REVISION} --local-dir {folder.name}"
    return f"fetch it at the pinned revision: {command}"


def test_a_missing_or_truncated_shard_is_refused_by_name_with_the_download_command(tmp_path):
    missing = write_snapshot(tmp_path / "a" / "Qwen3.5-4B")
    (missing / "model-00002-of-00002.safetensors").unlink()
    weights = {c.what: c for c in snapshot_checks(missing, hashes=False)}["snapshot weights"]
    assert (weights.status, weights.why, weights.fix) == (FAILS, "model-00002-of-00002.safetensors missing",
                                                          fix_of(missing))
    cut = write_snapshot(tmp_path / "b" / "Qwen3.5-4B")
    shard = cut / "model-00001-of-00002.safetensors"
    whole = shard.stat().st_size
    with shard.open("r+b") as f:
        f.truncate(whole - 10)
    weights = {c.what: c for c in snapshot_checks(cut, hashes=False)}["snapshot weights"]
    assert weights.status == FAILS
    assert weights.why == f"model-00001-of-00002.safetensors truncated: {whole - 10} bytes, its header says {whole}"


def test_a_snapshot_of_another_commit_is_refused_naming_the_file(tmp_path):
    from huggingface_hub._local_folder import write_download_metadata

    folder = write_snapshot(tmp_path / "Qwen3.5-4B")
    shard = folder / "model-00002-of-00002.safetensors"
    write_download_metadata(folder, shard.name, "0" * 40, hashlib.sha256(shard.read_bytes()).hexdigest())
    revision = {c.what: c for c in snapshot_checks(folder)}["snapshot revision"]
    assert revision.status == FAILS
    assert revision.why == f"{shard.name} at {'0' * 40}, not model.revision {REVISION}"


def test_hashes_find_a_changed_byte_the_sizes_cannot(tmp_path):
    folder = write_snapshot(tmp_path / "Qwen3.5-4B")
    shard = folder / "model-00001-of-00002.safetensors"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    assert statuses(snapshot_checks(folder, hashes=False)) == {
        "snapshot files": OK, "snapshot weights": OK, "snapshot revision": OK, "snapshot hashes": SKIPPED}
    hashes = {c.what: c for c in snapshot_checks(folder)}["snapshot hashes"]
    assert (hashes.status, hashes.why.split(" changed")[0]) == (FAILS, shard.name)


def test_files_copied_by_hand_leave_the_revision_unverified_and_a_missing_tokenizer_fails(tmp_path):
    folder = write_snapshot(tmp_path / "Qwen3.5-4B")
    shutil.rmtree(folder / ".cache")
    revision = {c.what: c for c in snapshot_checks(folder)}["snapshot revision"]
    assert revision.status == WARN and f"cannot verify revision {REVISION}" in revision.why
    (folder / "tokenizer.json").unlink()
    files = {c.what: c for c in snapshot_checks(folder)}["snapshot files"]
    assert files.status == FAILS and "tokenizer.json or vocab.json + merges.txt" in files.why
    (only,) = snapshot_checks(tmp_path / "elsewhere")
    assert (only.what, only.status) == ("snapshot", FAILS) and fix_of(tmp_path / "elsewhere") in only.fix


@pytest.fixture
def good_host(tmp_path, monkeypatch):
    """This process's environment as a passing GPU host, whatever the machine, and disk needs of 1 byte."""
    from apsft_dagster.core.doctor import profile_checks

    bin_dir = fake_bin(tmp_path / "host")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("CUDA_HOME", str(bin_dir.parent))
    for var in ("APSFT_GPU_PYTHON", "APSFT_GPU_WITHOUT_GPU", "APSFT_MODEL_DIR", "APSFT_GPU_LOCK"):
        monkeypatch.delenv(var, raising=False)
    for module in (disk, profile_checks):
        monkeypatch.setattr(module, "ENV_BYTES", 1)
        monkeypatch.setattr(module, "SNAPSHOT_BYTES", 1)
    return bin_dir


def test_apsft_doctor_on_the_full_profile_passes_then_names_a_cut_shard(tmp_path, good_host, capsys):
    from conftest import variant_config

    folder = write_snapshot(tmp_path / "Qwen3.5-4B")
    profile = variant_config(tmp_path, lambda raw: raw["model"].update(path=str(folder)), base="full")
    args = ["doctor", "--config", str(profile), "--store", str(tmp_path / "store"), "--hashes"]
    assert main(args) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert [line.split(":")[0].split(maxsplit=1) for line in out.splitlines()[:5]] == [
        ["ok", "nvidia driver"], ["ok", "GPU"], ["ok", "python 3.11"], ["ok", "platform"], ["ok", "nvcc"]]
    assert "ok         snapshot hashes: 2 LFS files match" in out and out.splitlines()[-1].startswith(
        "doctor: every requirement met")
    shard = folder / "model-00002-of-00002.safetensors"
    with shard.open("r+b") as f:
        f.truncate(100)
    assert main(args) == 1
    out = capsys.readouterr().out
    assert f"FAILS      snapshot weights: {shard.name} truncated: 100 bytes" in out
    assert out.splitlines()[-1].endswith("FAILS: fix snapshot weights, snapshot hashes before the first GPU-minute")


def test_a_cpu_profile_needs_no_gpu_and_no_profile_checks_the_host_only(tmp_path, good_host, capsys):
    for program in good_host.iterdir():
        program.unlink()  # no nvidia-smi, nvcc or python3.11 at all
    assert main(["doctor", "--profile", "smoke"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:5] == [f"not needed {what}: compute.device cpu" for what in
                       ("nvidia driver", "GPU", "python 3.11", "platform", "nvcc")]
    assert f"{NOT_NEEDED} snapshot: model.source embedded" in out[-2]
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAILS      nvidia driver: no nvidia-smi" in out
    assert [line for line in out.splitlines() if line[11:].startswith("snapshot")] == []
    assert main(["doctor", "--hashes"]) == 2
    assert "--store and --hashes check a profile's" in capsys.readouterr().err
