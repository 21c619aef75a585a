"""Rebuild the embedded models of the smoke profiles and store them as the tests' seed cache entries:
`smoke` (Qwen3.5's layout, the suite's model) and `smoke_vllm` (Qwen3's, which the vLLM lane is handed,
scripts/vllm_lane_model.py).

The test suite copies `tests/model_seed/<key>/` into its model cache before it starts, so a clean
clone (CI) does not spend a minute and more training the same deterministic model again; the build
itself keeps its determinism test (tests/test_model_cache.py, a small recipe through the same code),
and `test_the_committed_seed_is_the_smoke_profile_current_model` fails, naming this script, when
the key moves (the build code, the smoke config's model sections or a library version changed).

Usage: .venv/bin/python scripts/refresh_model_seed.py   (about 6 minutes on 2 cores; then commit tests/model_seed)
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from apsft_dagster.core.config import load_config
from apsft_dagster.core.embedded.cache import ENTRY, build_entry, cache_key
from apsft_dagster.core.tasks.splits import build_catalog

SEEDS = Path(__file__).resolve().parents[1] / "tests" / "model_seed"


PROFILES = ("smoke", "smoke_vllm")


def main() -> int:
    keys = {}
    for profile in PROFILES:
        config = load_config(profile)
        prompts = build_catalog(config)["prompt"].to_list()
        keys[profile] = (config, prompts, cache_key(config, prompts))  # profile_key's, the catalog built once
    SEEDS.mkdir(parents=True, exist_ok=True)
    wanted = {key for _, _, key in keys.values()}
    for old in SEEDS.iterdir():
        if old.name not in wanted:
            if old.is_dir():
                shutil.rmtree(old)
            else:
                old.unlink()
            print(f"removed the stale seed {old.name}")
    for profile, (config, prompts, key) in keys.items():
        if (SEEDS / key / ENTRY).is_file():
            print(f"{profile}: seed {key[:12]} is current")
            continue
        started = time.perf_counter()
        report = build_entry(config, prompts, SEEDS / key, lambda message: print(message, flush=True))
        print(f"{profile}: seed {key[:12]}: {report['parameters']:,} parameters, "
              f"final loss {report['final_loss']:.3f}, "
              f"built in {time.perf_counter() - started:.0f} s -> {SEEDS / key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
