"""Resumable training state through the store: adapter, optimizer, scheduler, RNG and progress.

A checkpoint is one directory artifact, swapped in atomically with its receipt written last
(`Store.put_dir`), so a training killed at any moment resumes from the last complete one. On CPU
a resumed run's final adapter is byte-identical to an uninterrupted run's.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from apsft_dagster.core.store import Store

STATE = "state.pt"
PROGRESS = "progress.json"


class Checkpoints:
    def __init__(self, store: Store, name: str):
        self.store, self.name = store, name

    def save(self, state: dict, progress: dict) -> None:
        def fill(directory: Path) -> None:
            torch.save(state, directory / STATE)
            (directory / PROGRESS).write_text(json.dumps(progress, sort_keys=True) + "\n")

        self.store.put_dir(self.name, fill)

    def load(self) -> tuple[dict, dict] | None:
        """The last complete checkpoint (verified against its receipt), or None."""
        if not self.store.exists(self.name):
            return None
        self.store.verify(self.name)
        directory = self.store.path(self.name)
        state = torch.load(directory / STATE, map_location="cpu", weights_only=False)
        return state, json.loads((directory / PROGRESS).read_text())

    def clear(self) -> None:
        self.store.remove(self.name)
