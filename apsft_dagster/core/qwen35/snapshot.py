"""A tiny trained snapshot on Qwen3.5's real vocabulary: what `full_cpu` (the dry run of `full`) loads.

The smoke profile's embedded recipe (its sizes, corpus of worked solutions, steps, seeds and
capability check: core/embedded/), built with Qwen3.5's real tokenizer and its embedding padded to
the real 248,320 rows (core/qwen35/pretrain.py says how it trains exactly at the cost of the rows
it uses), and positions for the registered limits (full's `vllm.max_model_len`). It is a local
snapshot like any: `full_cpu` loads it through `APSFT_MODEL_DIR` (or its `model.path`), as `full`
loads Qwen3.5-4B. Built once per content key in the model cache (core/embedded/cache.py, keyed
also by the real vocabulary's sources), then copied; `qwen3` gives the same recipe in Qwen3's
layout, the one vLLM's CPU backend runs here (the vLLM lane).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from apsft_dagster.core.config import ARCHITECTURES, Config, load_config

PROFILE = "full_cpu"  # the profile whose sealed splits the pretraining corpus is kept apart from
REPORT = "apsft_build.json"  # beside the snapshot's files: how it was built and its capability


def recipe(architecture: str) -> Config:
    """The smoke profile's embedded recipe, named for the real vocabulary, with positions for the
    registered limits (16,000-token records, a 12,288-token allowance after the prompt)."""
    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture {architecture!r}: one of {list(ARCHITECTURES)}")
    smoke = load_config("smoke")
    positions = load_config("full", require_snapshot=False).vllm.max_model_len
    return smoke.model_copy(update={
        "model": smoke.model.model_copy(update={"name": f"apsft-tiny-{architecture}-qwen35-vocab",
                                                "architecture": architecture}),
        "embedded": smoke.embedded.model_copy(update={"max_positions": positions})})


def build_snapshot(out_dir: str | Path, architecture: str = "qwen3_5", profile: str = PROFILE,
                   log: Callable[[str], None] = print) -> dict:
    """Fill `out_dir` (replaced whole) with the snapshot; its build report is also `REPORT` there.
    The corpus leaves out every prompt of `profile`'s task catalog."""
    from apsft_dagster.core.embedded.cache import embedded_model
    from apsft_dagster.core.tasks.catalog import build_catalog

    config = recipe(architecture)
    served = load_config(profile, require_snapshot=False)
    prompts = build_catalog(served)["prompt"].to_list()
    out = Path(out_dir)
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    report = embedded_model(config, prompts, tmp, log, real_vocab=True)
    report = {**report, "recipe": "smoke's embedded section on Qwen3.5's real vocabulary",
              "name": config.model.name, "excluded_catalog_of": profile}
    (tmp / REPORT).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    return report
