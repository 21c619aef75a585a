"""`apsft plan`: what a profile's run will cost, stage by stage, before it runs. Writes nothing:
no store folder, no Dagster instance, no torch; a local model's snapshot need not be here yet."""

from __future__ import annotations

import argparse
from pathlib import Path

from apsft_dagster.cli.args import profile_arguments
from apsft_dagster.core.config import load_config, resolve_config_path
from apsft_dagster.core.errors import PlanError
from apsft_dagster.core.paths import is_object_url, local_model_dir, store_root


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="print each stage's work, tokens, throughput, device-hours and budget verdict "
                                    "before the run (writes nothing)")
    profile_arguments(p)
    p.add_argument("--rehearsal", metavar="FILE",
                   help="scripts/gpu_rehearsal.py's JSON: its measured figures replace the profile's envelopes")
    p.add_argument("--gpu", choices=["h100", "h200"],
                   help="plan each engine stage's GPU memory on this device (h100 where compute.device is cuda)")
    p.add_argument("--gpu-memory-gib", type=float, metavar="N",
                   help="the device's total memory in GiB, as torch reports it (instead of --gpu's)")
    p.add_argument("--devices", type=int, metavar="N",
                   help="also price each stage's wall hours on N devices, one engine worker each, and Stage A's "
                        "total on 1, 2, 4 and 8 (default: the profile's ray.devices, else not shown)")
    p.set_defaults(handler=plan_command)


def _notes(config, source: Path, root: Path, found: bool) -> list[str]:
    notes = [f"profile {config.profile} ({source}), config digest {config.digest}"]
    snapshot = local_model_dir(config.model.path) if config.model.source == "local" else None
    if snapshot and not (snapshot / "config.json").is_file():
        notes.append(f"model snapshot not found at {snapshot}: the plan needs none; `apsft run` "
                     "will (place it there or set APSFT_MODEL_DIR)")
    notes.append(f"store {root}: " + ("read and verified, nothing written" if found else
                                      "absent: nothing has run, so every row is priced from the profile"))
    return notes


def plan_command(args: argparse.Namespace) -> int:
    from apsft_dagster.core.plan import plan
    from apsft_dagster.core.plan.table import render
    from apsft_dagster.core.store import Store

    if args.devices is not None and args.devices < 1:
        raise PlanError(f"--devices {args.devices}: the devices a stage spreads over are a whole number of 1 or "
                        "more (one engine worker per device); leave it out to price one device")
    config = load_config(args.profile, args.config, require_snapshot=False)
    location = args.store or store_root(config.profile)
    if is_object_url(location):
        raise PlanError(f"--store {location}: apsft plan reads a local store only (reading an object store would "
                        "fill this machine's mirror); point it at a local copy")
    root = Path(location)
    found = root.is_dir()
    rows = plan(config, Store(root) if found else None, args.rehearsal)
    notes = _notes(config, resolve_config_path(args.profile, args.config), root, found)
    devices = args.devices or (config.ray.devices if config.ray and config.ray.enabled else None)
    by_devices = _walls(config, rows, devices, notes) if devices else None
    print(render(rows, notes, devices), end="")
    if by_devices:
        print("\n" + by_devices, end="")
    if args.gpu or args.gpu_memory_gib or config.compute.device == "cuda":
        print("\n" + _memory(config, args.gpu or "h100", args.gpu_memory_gib), end="")
    return 0


def _walls(config, rows: list[dict], devices: int, notes: list[str]) -> str:
    """Prices the rows' wall hours on `devices` (core/plan/wall.py); Stage A's total on 1, 2, 4 and 8."""
    from apsft_dagster.core.plan.table import render_devices
    from apsft_dagster.core.plan.wall import add_walls, load_hours, stage_a_by_devices

    load = load_hours(config)
    add_walls(rows, devices, load)
    notes.append(f"wall hours on {devices} device{'s' * (devices != 1)}: a stage's partitions (tasks, instruments, "
                 "policies) spread over one engine worker per device, each taking the longest left; the longest "
                 "partition is the floor; plus a model load per worker (per partition where each loads its own "
                 "model); stages run one after another")
    notes.append("model load: " + ("not priced: no plan.model_load_seconds in the profile" if load is None else
                                   f"{config.plan.model_load_seconds.low:g}-{config.plan.model_load_seconds.high:g}"
                                   " s (profile plan.model_load_seconds)"))
    return render_devices(stage_a_by_devices(rows, load))


def _memory(config, gpu: str, gib: float | None) -> str:
    """The memory plan (core/plan/memory.py) on `gpu`, or on a device of `gib` GiB."""
    from apsft_dagster.core.plan.memory import GPUS, memory_notes, memory_plan, model_config
    from apsft_dagster.core.plan.table import render_memory

    if gib is not None and gib <= 0:
        raise PlanError(f"--gpu-memory-gib {gib}: a device's memory is a positive number of GiB")
    total_gib = gib if gib is not None else GPUS[gpu]
    device = f"{total_gib:.2f} GiB" + ("" if gib is not None else f" ({gpu}, torch's total_memory)")
    model, source = model_config(config)
    if model is None:
        return f"memory on {device}: {source}\n"
    total = round(total_gib * (1 << 30))
    return render_memory(memory_plan(config, model, total), device, memory_notes(config, model, source, total))
