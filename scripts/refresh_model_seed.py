"""Rebuild the smoke profile's embedded model and store it as the tests' seed cache entry.

The test suite copies `tests/model_seed/<key>/` into its model cache before it starts, so a clean
clone (CI) does not spend a minute and more training the same deterministic model again; the build
itself keeps its determinism test (tests/test_model_cache.py, a small recipe through the same code),
and `test_the_committed_seed_is_the_smoke_profile_current_model` fails, naming this script, when
the key moves (the build code, the smoke config's model sections or a library version changed).

Usage: .venv/bin/python scripts/refresh_model_seed.py   (about 80 s on 2 cores; then commit tests/model_seed)
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from apsft_dagster.core.config import load_config
from apsft_dagster.core.embedded.cache import build_entry, cache_key
from apsft_dagster.core.tasks.splits import build_catalog

SEEDS = Path(__file__).resolve().parents[1] / "tests" / "model_seed"


def main() -> int:
    config = load_config("smoke")
    prompts = build_catalog(config)["prompt"].to_list()
    key = cache_key(config, prompts)  # what profile_key gives, without building the catalog twice
    started = time.perf_counter()
    SEEDS.mkdir(parents=True, exist_ok=True)
    for old in SEEDS.iterdir():
        if old.name != key:
            if old.is_dir():
                shutil.rmtree(old)
            else:
                old.unlink()
            print(f"removed the stale seed {old.name}")
    report = build_entry(config, prompts, SEEDS / key, lambda message: print(message, flush=True))
    print(f"seed {key[:12]}: {report['parameters']:,} parameters, final loss {report['final_loss']:.3f}, "
          f"built in {time.perf_counter() - started:.0f} s -> {SEEDS / key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
