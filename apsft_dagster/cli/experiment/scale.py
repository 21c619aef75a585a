"""`apsft run --ray [ADDRESS] [--devices N]`: fan the engine stages out over a Ray cluster's devices
(apsft_dagster/workers/). Joined, or started, before anything is written: an address nobody answers
at, or a cluster without a device, stops the run in seconds with the store untouched."""

from __future__ import annotations

import argparse
import os

LOCAL = "local"  # `--ray` with no address: RAY_ADDRESS, the profile's ray.address, else a local cluster


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ray", nargs="?", const=LOCAL, metavar="ADDRESS",
                   help="run each engine stage's partitions on a Ray cluster, one worker per device: ADDRESS "
                        "(host:port, ray://host:10001) joins that cluster; none joins RAY_ADDRESS or starts "
                        "a local one")
    p.add_argument("--devices", type=int, metavar="N",
                   help="engine workers per stage (implies --ray; on cpu each holds compute.threads threads; "
                        "a local cluster gets N devices)")


def join(args: argparse.Namespace, config) -> str | None:
    """Where the stages' workers run: the cluster's address (joined or started here, and handed to
    the stages through the environment), or None without Ray. Raises ClusterError."""
    from apsft_dagster.core.errors import ClusterError
    from apsft_dagster.core.ray_settings import ADDRESS_ENV, DEVICES_ENV
    from apsft_dagster.workers.cluster import RUN_ENV, Target

    section = config.ray if config.ray is not None and config.ray.enabled else None
    if args.devices is not None and args.devices < 1:
        raise ClusterError(f"--devices {args.devices}: give at least one worker per stage")
    if args.ray is None and args.devices is None and section is None:
        os.environ.pop(RUN_ENV, None)
        return None
    chosen = args.ray if args.ray not in (None, LOCAL) else None
    address = chosen or (section.address if section else None) or os.environ.get(ADDRESS_ENV) or None
    devices = args.devices if args.devices is not None else (section.devices if section else None)
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ClusterError("--ray: Ray is not installed in this environment; `pip install -e '.[ray]'` "
                           "(the `ray` extra) or run without --ray") from None
    from apsft_dagster.workers.cluster import connect, require_devices

    where = Target(address, devices)
    gcs = connect(config, where)
    room = require_devices(config, gcs)
    os.environ[RUN_ENV], os.environ[DEVICES_ENV] = gcs, str(devices or room)
    kind = "GPU" if config.compute.device == "cuda" else f"CPU ({config.compute.threads} threads each)"
    return (f"Ray cluster {gcs} ({'joined' if address else 'started here'}): {devices or room} {kind} workers "
            f"per engine stage, room for {room}")
