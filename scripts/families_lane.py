"""The families lane: the smoke protocol, to a verdict, on tiny snapshots of other model families.

For each family (core/families/templates.py: llama, qwen3, qwen3_moe, gemma3_text, mistral) it builds the
snapshot into `.apsft/families/<family>/` (kept while its key holds: the build code, smoke's model sections,
the library versions), then runs `apsft run --config configs/families/<profile>.yaml` into a store of its own
and prints one line per family: architecture, template, markers, stages, checks, verdict and wall seconds.
Nothing in the package is told which family it runs: the profile names a snapshot folder, no more.
The results go to `.apsft/families/results.json`; docs/architectures.md records them with commit and
calibration.

Usage: .venv/bin/python scripts/families_lane.py [--build-only] [FAMILY ...]   (each family: about 3 minutes
of pretraining once, then about 1.5 minutes per run on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from importlib import metadata

from apsft_dagster.core.config import load_config
from apsft_dagster.core.embedded.cache import LIBRARIES, code_digest
from apsft_dagster.core.families.templates import FAMILIES
from apsft_dagster.core.paths import PROJECT_ROOT, state_dir
from apsft_dagster.core.store import fingerprint
from apsft_dagster.core.tasks.catalog import build_catalog

PROFILES = {"llama": "llama", "qwen3": "qwen3", "qwen3_moe": "qwen3_moe", "gemma3_text": "gemma3",
            "mistral": "mistral"}
CODE = ("core/families", "core/embedded/build.py", "core/embedded/model.py", "core/text_protocol.py", "core/tasks")


def build_key(config) -> str:
    """What a family snapshot's bytes depend on: the build code, smoke's model sections, the libraries."""
    return fingerprint({"code": code_digest(CODE), "embedded": config.embedded.model_dump(mode="json"),
                        "seeds": config.seeds.model_dump(mode="json"),
                        "libraries": {name: metadata.version(name) for name in LIBRARIES}})


def ensure_snapshot(family: str, config, catalog_prompts) -> dict:
    from apsft_dagster.core.families.build import build_family

    folder = state_dir() / "families" / family
    key = build_key(config)
    report_file = folder / "apsft_family.json"
    if report_file.is_file() and json.loads(report_file.read_text()).get("key") == key:
        return json.loads(report_file.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    started = time.monotonic()
    report = build_family(family, config, catalog_prompts, partial)
    report.update(key=key, build_seconds=round(time.monotonic() - started, 1))
    (partial / "apsft_family.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    partial.rename(folder)
    return report


def run_family(family: str) -> dict:
    store = state_dir() / "families" / "stores" / family
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir(parents=True)
    env = {**os.environ, "APSFT_STATE_DIR": str(store / "state")}
    for name in ("APSFT_CONFIG", "APSFT_PROFILE", "APSFT_STORE_DIR", "APSFT_MODEL_DIR"):
        env.pop(name, None)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "run", "--config",
                           f"configs/families/{PROFILES[family]}.yaml", "--store", str(store / "store")],
                          cwd=PROJECT_ROOT, env=env, capture_output=True, text=True)
    (store / "run.log").write_text(proc.stdout + proc.stderr)
    summary = re.search(r"apsft run: (\d+)/(\d+) stages succeeded.*checks (\d+)/(\d+) passed", proc.stdout)
    verdict = re.search(r"^  verdict: (.*)$", proc.stdout, re.M)
    return {"returncode": proc.returncode, "seconds": round(time.monotonic() - started, 1),
            "stages": f"{summary[1]}/{summary[2]}" if summary else None,
            "checks": f"{summary[3]}/{summary[4]}" if summary else None,
            "verdict": verdict[1] if verdict else None, "log": str(store / "run.log"),
            "tail": None if proc.returncode == 0 else (proc.stdout + proc.stderr)[-1500:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("families", nargs="*", metavar="FAMILY", help=f"any of {', '.join(FAMILIES)} (default: all)")
    parser.add_argument("--build-only", action="store_true")
    args = parser.parse_args()
    if unknown := sorted(set(args.families) - set(FAMILIES)):
        parser.error(f"unknown families {unknown}: choose from {', '.join(FAMILIES)}")
    config = load_config("smoke")
    prompts = build_catalog(config)["prompt"].to_list()
    results_file = state_dir() / "families" / "results.json"
    results = json.loads(results_file.read_text()) if results_file.is_file() else {}
    for family in args.families or FAMILIES:
        built = ensure_snapshot(family, config, prompts)
        result = {"architecture": built["architecture"], "parameters": built["parameters"],
                  "final_loss": round(built["final_loss"], 3), "markers": built["markers"] or "defaults"}
        if not args.build_only:
            result.update(run_family(family))
        results[family] = result
        print(json.dumps({family: {k: v for k, v in result.items() if k != "tail"}}), flush=True)
        if result.get("tail"):
            print(result["tail"], file=sys.stderr)
        results_file.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 0 if all(r.get("returncode", 0) == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
