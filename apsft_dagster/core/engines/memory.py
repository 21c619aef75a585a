"""Handing memory back: dropped engines collected now, cached CUDA blocks returned to the driver;
and the collector kept off what a process loaded once (`freeze_loaded`)."""

from __future__ import annotations

import gc
import os

FREEZE = "APSFT_GC_FREEZE"  # `off`: every full collection walks the whole heap again (benchmarks/bench_gc.py)


def free_memory() -> None:
    """Collect dropped engines now and hand cached CUDA blocks back to the driver."""
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def freeze_loaded() -> None:
    """Move what is alive now (modules, classes, Dagster's definitions, a loaded model's wrappers) into
    the collector's permanent generation: a full collection, ours in `free_memory` or Python's own,
    then walks only what the work allocates. In a smoke run the heap of torch, transformers and
    Dagster made 28 full collections cost 7 s; it never changes what is computed."""
    if os.environ.get(FREEZE, "").lower() == "off":
        return
    gc.collect()  # what is garbage already is freed, not kept forever
    gc.freeze()
