"""Rebuild the embedded models the package ships (apsft_dagster/models/<key>/, core/embedded/shipped.py):
`smoke` (Qwen3.5's layout: command 1 and the suite), `smoke_vllm` (Qwen3's, which the vLLM lane is
handed, scripts/vllm_lane_model.py) and `laptop` (the registered counts on a laptop).

A run whose model cache lacks its key copies the shipped entry of that key, verified file by file,
so a fresh clone's `apsft run` (and the suite) do no pretraining. When the key moves (the build code,
a profile's model sections or a library version changed), `tests/test_model_cache.py` fails naming
this script; an entry whose key is current is kept, entries of keys no profile has are removed.
Each build goes through the model cache's own code (`build_entry`), with the cache off otherwise:
the same bytes `APSFT_MODEL_CACHE=off apsft run` builds.

`--check` builds the given profiles' models again into a temporary folder and compares them file by
file with the shipped entries, writing nothing: exit 1 naming the first file that differs (the
rebuild lane: the shipped bytes are what this code builds).

Usage: .venv/bin/python scripts/refresh_model_seed.py [--check] [PROFILE ...]   (default: every shipped
       profile; smoke and smoke_vllm about 6 minutes together on 2 cores, laptop 15-21 minutes; then
       commit apsft_dagster/models)
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from apsft_dagster.core.config import load_config
from apsft_dagster.core.embedded.cache import ENTRY, build_entry, cache_key
from apsft_dagster.core.embedded.shipped import SHIPPED, SHIPPED_PROFILES
from apsft_dagster.core.tasks.catalog import build_catalog


def check(profiles: list[str], keys: dict) -> int:
    """Rebuild each profile's model with the cache's own code into a temporary folder; compare."""
    import tempfile

    from apsft_dagster.core.store import dir_digests

    for profile in profiles:
        config, prompts, key = keys[profile]
        with tempfile.TemporaryDirectory() as scratch:
            started = time.perf_counter()
            build_entry(config, prompts, Path(scratch) / key, lambda message: None)
            built = {k: v for k, v in dir_digests(Path(scratch) / key).items() if k != ENTRY}
        folder = SHIPPED / key
        shipped = {k: v for k, v in dir_digests(folder).items() if k != ENTRY} if folder.is_dir() else {}
        differ = sorted(n for n in set(built) | set(shipped) if built.get(n) != shipped.get(n))
        if differ:
            print(f"{profile}: the rebuild differs from the shipped entry {SHIPPED / key} in {differ[0]}"
                  f" ({len(differ)} file(s))")
            return 1
        print(f"{profile}: rebuilt in {time.perf_counter() - started:.0f} s, {len(built)} files byte-identical "
              f"to the shipped entry {key[:12]}")
    return 0


def main(argv: list[str]) -> int:
    checking = "--check" in argv
    argv = [a for a in argv if a != "--check"]
    keys = {}
    for profile in SHIPPED_PROFILES:
        config = load_config(profile)
        prompts = build_catalog(config)["prompt"].to_list()
        keys[profile] = (config, prompts, cache_key(config, prompts))  # profile_key's, the catalog built once
    if checking:
        return check(argv or list(SHIPPED_PROFILES), keys)
    SHIPPED.mkdir(parents=True, exist_ok=True)
    wanted = {key for _, _, key in keys.values()}
    for old in SHIPPED.iterdir():
        if old.name not in wanted and old.is_dir():
            shutil.rmtree(old)
            print(f"removed the stale entry {old.name}")
    for profile in argv or SHIPPED_PROFILES:
        config, prompts, key = keys[profile]
        if (SHIPPED / key / ENTRY).is_file():
            print(f"{profile}: entry {key[:12]} is current")
            continue
        started = time.perf_counter()
        report = build_entry(config, prompts, SHIPPED / key, lambda message: print(message, flush=True))
        print(f"{profile}: entry {key[:12]}: {report['parameters']:,} parameters, "
              f"final loss {report['final_loss']:.3f}, "
              f"built in {time.perf_counter() - started:.0f} s -> {SHIPPED / key}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
