"""`apsft run` on a GPU: each engine stage holds the machine's device slot (core/device_slot.py) while
its runs execute, so two runs of two stores (two instances, two `gpu` pools) never load a model onto
the same GPU at once. On a Ray cluster Ray's placement decides instead; a CPU run takes no lock."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from apsft_dagster.core.device_slot import device_slot
from apsft_dagster.core.paths import state_dir
from apsft_dagster.core.progress import shown
from apsft_dagster.core.waiting import Holder

if TYPE_CHECKING:  # Dagster is imported only once the run starts
    from apsft_dagster.stage import Stage


def holds_device(config, stage: Stage) -> bool:
    """Whether `stage` takes the machine's device slot: an engine stage on CUDA, off Ray."""
    from apsft_dagster.workers.cluster import target

    return bool(stage.engine) and config.compute.device == "cuda" and target(config) is None


def gpu_guard(config, store: str, state: Path | None = None) -> Callable[[Stage], AbstractContextManager]:
    """`runner.run_stages`' guard for this run: the device slot around each stage that holds the device
    (its wait said on stderr as the stage's progress), nothing around the others."""
    def guard(stage: Stage) -> AbstractContextManager:
        if not holds_device(config, stage):
            return nullcontext()
        holder = Holder(f"apsft-run-{os.getpid()}", time.time(), config.profile, str(store), os.getpid(),
                        socket.gethostname(), stage.job)
        return device_slot(state or state_dir(), holder, shown(stage.job))
    return guard
