"""Hugging Face Trainer checkpoints (TRL's too): `checkpoint-<N>/` folders in the output folder.

Each holds `trainer_state.json` (its `global_step` must be N), the weights (a PEFT adapter's
`adapter_model.safetensors` or `.bin`, or a model's `model*.safetensors` / `pytorch_model*.bin`)
and, for an adapter, `adapter_config.json` (`base_model_name_or_path`). A checkpoint is READY when
its weights are there, else INCOMPLETE; its size is the sum of its files' sizes (weights are
measured, never read). An adapter's deployment status and deployability are not recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from apsft_dagster.core.run_report import schema
from apsft_dagster.core.run_report.folder import Reader, fail
from apsft_dagster.core.run_report.importers.metrics import WAY_OUT, step_of
from apsft_dagster.core.run_report.importers.trainer_json import document

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
READ = ("trainer_state.json", "adapter_config.json")
ADAPTER_WEIGHTS = re.compile(r"^adapter_model\.(safetensors|bin)$")
MODEL_WEIGHTS = re.compile(r"^(model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)$")


@dataclass(frozen=True)
class Saved:
    checkpoints: schema.Checkpoints | None
    adapters: schema.Adapters | None
    base_model: str | None
    states: dict[int, dict]  # each checkpoint's trainer_state.json, by step
    notes: tuple[str, ...] = ()


def folders(folder: Path) -> list[tuple[int, Path]]:
    found = [(int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and (m := CHECKPOINT.match(p.name))]
    return sorted(found)


def inputs(folder: Path) -> tuple[list[Path], list[Path]]:
    read, measured = [], []
    for _, path in folders(folder):
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            (read if f.parent == path and f.name in READ else measured).append(f)
    return read, measured


def _base_model(path: Path, doc: dict) -> str | None:
    base = doc.get("base_model_name_or_path")
    if base is not None and not isinstance(base, str):
        raise fail(path, "base_model_name_or_path", f"must be a string, got {type(base).__name__}", WAY_OUT)
    return base or None


def _one(step: int, path: Path, reader: Reader) -> tuple[schema.Checkpoint, schema.Adapter | None, str | None, dict]:
    state = document(path / "trainer_state.json", reader, dict)
    said = step_of(state.get("global_step"), path / "trainer_state.json", "global_step")
    if said != step:
        raise fail(path / "trainer_state.json", "global_step", f"says {said} but the folder is {path.name}", WAY_OUT)
    files = sorted(p for p in path.rglob("*") if p.is_file() and not (p.parent == path and p.name in READ))
    size = sum(reader.measure(p) for p in files)
    names = {p.name for p in files if p.parent == path}
    adapter = base = None
    if (path / "adapter_config.json").is_file():
        base = _base_model(path / "adapter_config.json", document(path / "adapter_config.json", reader, dict))
        ready = "READY" if any(ADAPTER_WEIGHTS.match(n) for n in names) else "INCOMPLETE"
        adapter = schema.Adapter(step=step, id=path.name, status=ready, deployment_status=None, deployable=None)
    weights = any(ADAPTER_WEIGHTS.match(n) or MODEL_WEIGHTS.match(n) for n in names)
    size += sum((path / n).stat().st_size for n in READ if (path / n).is_file())
    status = "READY" if weights else "INCOMPLETE"
    return schema.Checkpoint(step=step, id=path.name, status=status, size_bytes=size), adapter, base, state


def load(folder: Path, reader: Reader) -> Saved:
    """Every checkpoint-N folder; sections are None (not recorded) when the run saved none."""
    found = [_one(step, path, reader) for step, path in folders(folder)]
    checkpoints = schema.Checkpoints(checkpoints=[c for c, *_ in found]) if found else None
    adapter_list = [a for _, a, _, _ in found if a is not None]
    bases = sorted({b for *_, b, _ in found if b})
    notes = (f"Checkpoints name base models {', '.join(bases)}; the header shows the first.",) if len(bases) > 1 else ()
    return Saved(checkpoints=checkpoints, adapters=schema.Adapters(adapters=adapter_list) if adapter_list else None,
                 base_model=bases[0] if bases else None, states={c.step: s for c, _, _, s in found}, notes=notes)
