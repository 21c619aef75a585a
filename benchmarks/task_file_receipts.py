"""Issue 60's acceptance for tasks from a file: smoke run from its procedural families written as a task file
(examples/task_file/smoke_taskfile.yaml) gives receipts byte-identical to the builders' run, except those that
cite the task source. Runs `apsft run --config examples/task_file/smoke_taskfile.yaml` into a fresh store (about
130 CPU-s: run it under `flock /tmp/apsft-heavy.lock`), then compares every receipt with a builders' store
(benchmarks/compare_stores.py's digests) and says why each differing one differs:

- `config digest` / `profile`: the artifact cites the config digest or the profile name (the source is in both);
- `key: <fields>`: a bank shard's key differs in these settings (core/bank_keys.py `changes`): `tasks.source_sha256`
  is the task source; `code ...` means the code changed since the builders' store was made;
- `cites <artifact>`: the artifact holds the SHA-256 of another differing artifact (an index, the seal).
Anything else is `UNEXPLAINED`. Exit 0 when every difference comes from the task source.

Run: .venv/bin/python benchmarks/task_file_receipts.py BUILDERS_STORE [--store OUT] [--state DIR] [--no-run]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_stores import digests  # noqa: E402

from apsft_dagster.core.bank_keys import changes  # noqa: E402
from apsft_dagster.core.config import load_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "examples" / "task_file" / "smoke_taskfile.yaml"
SOURCE_FIELDS = ("tasks.source_sha256",)


def run_from_file(store: Path, state: Path) -> None:
    env = {**os.environ, "APSFT_STATE_DIR": str(state)}
    subprocess.run([str(ROOT / ".venv/bin/apsft"), "run", "--config", str(PROFILE), "--store", str(store)],
                   check=True, env=env, cwd=ROOT)


def why(name: str, a: Path, b: Path, cited: dict[str, str], marks: dict[str, str]) -> tuple[str, bool]:
    """(the reason a differing artifact differs, whether the task source explains it)."""
    left, right = (a / name).read_bytes(), (b / name).read_bytes()
    if "/keys/" in name:
        old, new = json.loads(left)["settings"], json.loads(right)["settings"]
        fields = [c[0] for c in changes(old, new)]
        return "key: " + ", ".join(fields), all(f in SOURCE_FIELDS for f in fields)
    found = [label for mark, label in marks.items() if mark.encode() in right]
    others = sorted(other for digest, other in cited.items() if other != name and digest.encode() in left)
    if others:
        found.append(f"cites {others[0]}" if len(others) == 1 else f"cites {len(others)} of them ({others[0]}, ...)")
    return (", ".join(found), True) if found else ("UNEXPLAINED", False)


def compare(builders: Path, filed: Path) -> int:
    a, b = digests(builders), digests(filed)
    receipts = sorted(k for k in set(a) & set(b) if k.endswith(".receipt.json"))
    differ = [k for k in receipts if a[k] != b[k]]
    artifacts = {k.removesuffix(".receipt.json") for k in differ}
    cited = {json.loads((builders / k).read_bytes())["sha256"]: k.removesuffix(".receipt.json") for k in differ}
    smoke, taskfile = load_config("smoke"), load_config(path=PROFILE)
    marks = {taskfile.digest: "config digest", '"profile": "smoke_taskfile"': "profile"}
    ok = set(a) ^ set(b) <= {"audits.lock"}
    print(f"receipts: {len(receipts)} in both; identical {len(receipts) - len(differ)}; differ {len(differ)}; "
          f"only one side {sorted(k for k in set(a) ^ set(b) if k.endswith('.receipt.json'))}")
    print(f"config digests: builders {smoke.digest[:12]}, file {taskfile.digest[:12]}")
    for name in sorted(artifacts):
        reason, explained = why(name, builders, filed, cited, marks)
        ok &= explained
        print(f"  {name}: {reason}")
    print("every difference cites the task source" if ok else "some differences do not come from the task source")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("builders", type=Path, help="a finished smoke store made by the builders")
    p.add_argument("--store", type=Path, default=Path("/tmp/apsft-taskfile/store"))
    p.add_argument("--state", type=Path, default=Path("/tmp/apsft-taskfile/state"))
    p.add_argument("--no-run", action="store_true", help="compare an existing --store only")
    args = p.parse_args(argv)
    if not args.no_run:
        run_from_file(args.store, args.state)
    return compare(args.builders, args.store)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
