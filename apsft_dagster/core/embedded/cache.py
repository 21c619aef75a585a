"""A content-addressed cache of the embedded model: trained once per key, copied into each store.

The key hashes everything that determines the model's bytes and its capability report: the
config sections the build reads, the catalog prompts it keeps out of its corpus, the source of
the code that builds it, the versions of the libraries that compute it, and the CPU kernels they
run (core/determinism.py: pinned, the same on every AVX2 machine). Equal keys give
equal bytes (the build is deterministic; a test proves it with the cache off), so a hit is the
same model as a rebuild, with the same fingerprint and so the same seal.

`APSFT_MODEL_CACHE` names the cache folder (default `<state>/model_cache`); `off` disables it, and
with it the shipped models. A miss takes the shipped entry of its key where the project ships one
(core/embedded/shipped.py: verified file by file, refused by name) before it would build.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Collection
from importlib import metadata
from pathlib import Path

from apsft_dagster.core.config import Config, canonical_json
from apsft_dagster.core.determinism import kernel_settings
from apsft_dagster.core.embedded.shipped import (
    ENTRY,
    copy_entry,
    entry_files,
    place_entry,
    shipped_entry,
    verify_shipped,
)
from apsft_dagster.core.paths import model_cache_dir
from apsft_dagster.core.store import dir_digests, fingerprint, sha256_bytes, write_atomic

PACKAGE = Path(__file__).resolve().parents[2]  # apsft_dagster/
BUILD_CODE = ("core/embedded", "core/tasks", "core/splits.py", "core/protocol.py", "core/seeds.py",
              "core/engines/seeded_sampler.py",  # the capability check samples through its warpers
              "core/chat_template.jinja")
NOT_BUILD_CODE = ("core/embedded/cache.py", "core/embedded/shipped.py")  # they store and copy; no byte of a model
LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors")


def code_digest(parts: tuple[str, ...] = BUILD_CODE) -> str:
    """SHA-256 over the build code's sources (relative path -> SHA-256); `parts`: another build's (the families
    lane's snapshots, scripts/families_lane.py)."""
    files = {}
    for part in parts:
        root = PACKAGE / part
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            if (name := path.relative_to(PACKAGE).as_posix()) not in NOT_BUILD_CODE:
                files[name] = sha256_bytes(path.read_bytes())
    return fingerprint(files)


def cache_key(config: Config, catalog_prompts: Collection[str], real_vocab: bool = False) -> str:
    """Everything the build reads: config sections, seeds, excluded prompts, code, library versions
    (and, on Qwen3.5's real vocabulary, its tokenizer's sources and the code that pretrains on it)."""
    inputs = {
        "model_name": config.model.name,
        "architecture": config.model.architecture,
        "embedded": config.embedded.model_dump(mode="json"),
        "seeds": {"experiment": config.seeds.experiment, "pretrain_tasks": config.seeds.pretrain_tasks},
        "train_split": config.tasks.train.model_dump(mode="json"),  # the capability check's cells
        "capability_sampling": config.harvest.sampling.model_dump(mode="json"),
        "excluded_prompts": sha256_bytes("\n".join(sorted(catalog_prompts)).encode()),
        "code": code_digest(),
        "libraries": {name: metadata.version(name) for name in LIBRARIES},
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "cpu_kernels": kernel_settings(),
    }
    if real_vocab:
        from apsft_dagster.core.qwen35.tokenizer import vocabulary_identity

        inputs["real_vocab"] = vocabulary_identity()
    return hashlib.sha256(canonical_json(inputs)).hexdigest()


def profile_key(config: Config) -> str:
    """The cache key of a profile's embedded model from its config alone (the catalog is rebuilt,
    as the task_catalog asset builds it: from the builders or the task file, core/task_file/source.py)."""
    from apsft_dagster.core.task_file.source import task_catalog

    return cache_key(config, task_catalog(config)["prompt"].to_list())


def model_at_hand(config: Config) -> str | None:
    """`"cache"` or `"shipped"` where a run of this profile would copy its embedded model (its key is in
    the model cache, or the package ships it), None where it would build it (or the cache is off)."""
    folder = model_cache_dir()
    if folder is None:
        return None
    key = profile_key(config)
    if (folder / key / ENTRY).is_file():
        return "cache"
    return "shipped" if shipped_entry(key) is not None else None


def embedded_model(config: Config, catalog_prompts: Collection[str], out_dir: Path,
                   log: Callable[[str], None], real_vocab: bool = False) -> dict:
    """Fill `out_dir` with the embedded model (from the cache on a hit, else from the shipped entry
    of its key, else by building it) and return the build report plus `cache` ("hit", "shipped",
    "miss" or "off") and `cache_key`."""
    folder = model_cache_dir()
    key = cache_key(config, catalog_prompts, real_vocab)
    if folder is None:
        from apsft_dagster.core.embedded.build import build_embedded  # torch and transformers: only to build

        return {**build_embedded(config, catalog_prompts, out_dir, log, real_vocab), "cache": "off", "cache_key": key}
    entry = folder / key
    report, shipped = _read_entry(entry, log), shipped_entry(key)
    if report is None and shipped is not None:
        report = verify_shipped(shipped)  # refused by name before anything is copied
        copy_entry(shipped, entry)
        log(f"model cache miss ({key[:12]}): the shipped model {shipped.name[:12]}, verified, no build")
        status = "shipped"
    elif report is None:
        log(f"model cache miss ({key[:12]}): building the embedded model")
        report = build_entry(config, catalog_prompts, entry, log, real_vocab)
        status = "miss"
    else:
        log(f"model cache hit ({key[:12]}): {entry}")
        status = "hit"
    for path in sorted(entry.iterdir()):
        if path.name != ENTRY:
            shutil.copyfile(path, out_dir / path.name)
    return {**report, "cache": status, "cache_key": key}


def _read_entry(entry: Path, log: Callable[[str], None]) -> dict | None:
    """The cached report if the folder's files still match the fingerprint recorded with it."""
    try:
        recorded = json.loads((entry / ENTRY).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if fingerprint(entry_files(entry)) != recorded["fingerprint"]:
        log(f"model cache entry {entry} does not match its recorded fingerprint; rebuilding it")
        return None
    return recorded["report"]


def build_entry(config: Config, catalog_prompts: Collection[str], entry: Path,
                log: Callable[[str], None], real_vocab: bool = False) -> dict:
    """Build into a temp sibling and rename it into place, so a killed build leaves no entry."""
    tmp = entry.with_name(f".{entry.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    from apsft_dagster.core.embedded.build import build_embedded  # torch and transformers: only to build

    report = build_embedded(config, catalog_prompts, tmp, log, real_vocab)
    files = dir_digests(tmp)
    doc = {"report": report, "fingerprint": fingerprint(files), "files": files}  # files: a shipped entry's check
    write_atomic(tmp / ENTRY, json.dumps(doc, sort_keys=True, indent=1).encode())
    place_entry(tmp, entry)
    return report
