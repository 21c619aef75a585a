"""The rehearsal's JSON, written whole after every phase (a temp file renamed over),
so a run cut off or failing late keeps every figure measured before.

`phases` holds one entry per phase in the order run: `status` `done`, `failed` (with `error`, and
`traceback`: a failure is recorded and the next phases still run), or `skipped` (with `reason`:
what it needs did not finish, or the machine cannot run it); `seconds`; where CUDA is present, the
device's `free_gpu_memory_gib` when the phase began (after the previous phase's memory was handed
back: vLLM refuses to start unless its share of the device is free) and torch's
`peak_gpu_memory_gib` during it. A phase's figures go to the top level under their own keys (the
format `apsft plan --rehearsal` reads, core/plan/rates.py); `finished` turns true when the last
phase is written.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from apsft_dagster.core.engines.memory import free_memory

GIB = 1 << 30


class PhaseSkipped(Exception):
    """Raised by a phase that cannot run on this machine; its message says why."""


class Journal:
    def __init__(self, path: Path, head: dict, log: Callable[[str], None] = print):
        self.path, self.log = Path(path), log
        self.doc = {**head, "phases": {}, "finished": False}
        self.started = time.perf_counter()
        self.write()

    def write(self) -> None:
        self.doc["seconds"] = time.perf_counter() - self.started
        write_whole(self.path, json.dumps(self.doc, indent=1) + "\n")  # phases in the order run

    def status(self, name: str) -> str | None:
        return self.doc["phases"].get(name, {}).get("status")

    @property
    def failed(self) -> list[str]:
        return [name for name, entry in self.doc["phases"].items() if entry["status"] == "failed"]

    def run(self, name: str, measure: Callable[[], dict], needs: tuple[str, ...] = ()) -> bool:
        """Run one phase after handing back the previous one's memory; `measure()` returns
        {top-level key: figures}, merged into the document. Returns whether it is done."""
        entry = memory_before()
        started = time.perf_counter()
        missing = [n for n in needs if self.status(n) != "done"]
        if missing:
            entry |= {"status": "skipped", "reason": f"needs {', '.join(missing)}, which did not finish"}
        else:
            try:
                figures = measure()
            except PhaseSkipped as exc:
                entry |= {"status": "skipped", "reason": str(exc)}
            except Exception as exc:  # noqa: BLE001  (recorded; the phases that do not need this one still run)
                entry |= {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc()}
            else:
                entry["status"] = "done"
                merge(self.doc, figures)
        entry["seconds"] = time.perf_counter() - started
        entry |= memory_after()
        self.doc["phases"][name] = entry
        self.write()
        self.log(f"{name}: {entry['status']}" + (f" ({entry.get('error') or entry.get('reason')})"
                                                  if entry["status"] != "done" else f" in {entry['seconds']:.1f} s"))
        return entry["status"] == "done"

    def finish(self, extra: dict) -> None:
        merge(self.doc, extra)
        self.doc["finished"] = True
        self.write()


def write_whole(path: Path, text: str) -> None:
    """`text` at `path` whole or not at all. Not `store.write_atomic`: core.store imports polars, and
    the journal must start on a device image that may lack it (the phase that needs it fails, recorded)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def merge(doc: dict, figures: dict) -> None:
    """`figures` into `doc`, mappings key by key (two phases may fill one key: `vllm`)."""
    for key, value in figures.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            merge(doc[key], value)
        else:
            doc[key] = value


def memory_before() -> dict:
    """Hand back what the previous phase dropped; on CUDA, what is free now (the whole device's)."""
    free_memory()
    import torch

    if not torch.cuda.is_available():
        return {}
    torch.cuda.reset_peak_memory_stats()
    free, total = torch.cuda.mem_get_info()
    return {"free_gpu_memory_gib": free / GIB, "total_gpu_memory_gib": total / GIB}


def memory_after() -> dict:
    import torch

    return {"peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / GIB} if torch.cuda.is_available() else {}
