"""Handing memory back: dropped engines collected now, cached CUDA blocks returned to the driver."""

from __future__ import annotations

import gc


def free_memory() -> None:
    """Collect dropped engines now and hand cached CUDA blocks back to the driver."""
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
