"""The Ray cluster a run's engine stages fan out over: which one (`target`), joining or starting it
(`connect`), and what each worker asks of it (`worker_options`).

`apsft run --ray [ADDRESS] [--devices N]` or a profile's `ray` section (core/config/sections/ray.py) turns
it on. An address (the flag, the section, else Ray's own `RAY_ADDRESS`) joins that cluster; none
starts a local one owned by the `apsft run` process, which its stages join through `RUN_ENV` (set
for the stages, in-process or in a child interpreter). An address nobody answers at, or a cluster
without a device for a worker, fails in seconds with a `ClusterError`, before anything is written.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from apsft_dagster.core.errors import ClusterError
from apsft_dagster.core.ray_settings import ADDRESS_ENV, DEVICES_ENV

RUN_ENV = "APSFT_RAY"  # the address the run's stages join ("local": a stage starts its own local cluster)
NAMESPACE = "apsft"
PROBE_S = 3.0  # an address must answer a TCP connect within this (ray.init itself retries for minutes)
LOCAL_OBJECT_STORE = 128 << 20  # the workers pass JSON results only: the store's default (30% of RAM) is waste


@dataclass(frozen=True)
class Target:
    """Where a stage's workers run: `address` None = a local cluster; `devices` None = every device."""

    address: str | None
    devices: int | None


def target(config) -> Target | None:
    """Where this stage's engine workers run: the run's choice (`RUN_ENV`, set by `apsft run --ray`),
    else the profile's `ray` section; None = no Ray (the stage's own process, and the second core)."""
    devices = os.environ.get(DEVICES_ENV)
    if (address := os.environ.get(RUN_ENV)) is not None:
        return Target(None if address in ("", "local") else address, int(devices) if devices else None)
    section = config.ray
    if section is None or not section.enabled:
        return None
    return Target(section.address or os.environ.get(ADDRESS_ENV), section.devices)


def device_kind(config) -> str:
    """The Ray resource one engine worker holds: a GPU on cuda, `compute.threads` CPUs on cpu."""
    return "GPU" if config.compute.device == "cuda" else "CPU"


def worker_options(config) -> dict:
    """Ray actor options for one engine worker: one GPU (Ray sets CUDA_VISIBLE_DEVICES, so the
    engine's `cuda:0` is that GPU), or `compute.threads` CPUs; no restart by Ray: the pool replaces a
    dead worker itself and gives its partition to another (workers/ray_pool.py)."""
    share = {"num_gpus": 1, "num_cpus": 1} if device_kind(config) == "GPU" else {"num_cpus": config.compute.threads}
    return {**share, "max_restarts": 0, "max_concurrency": 1, "namespace": NAMESPACE}


def worker_need(config) -> float:
    """How much of its device kind (`device_kind`) one engine worker holds."""
    return worker_options(config)["num_gpus" if device_kind(config) == "GPU" else "num_cpus"]


def probe(address: str) -> None:
    """Fail in seconds where nothing answers at `address` (`host:port` or `ray://host:port`)."""
    if address == "auto":
        return  # Ray finds the local cluster itself, and says at once when there is none
    hostport = address.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"Ray address {address!r}: use host:port (the GCS, `ray start --head` prints it) "
                           "or ray://host:10001")
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_S).close()
    except OSError as exc:
        raise ClusterError(f"Ray address {address}: nothing answers there ({exc.strerror or exc}); start the cluster "
                           f"(`ray start --head`), fix --ray / {ADDRESS_ENV} / the profile's ray.address, or run "
                           "`apsft run --ray` with no address for a local cluster") from None


def local_resources(config, devices: int | None) -> dict:
    """What a local cluster gets: `devices` workers' worth (default: the machine's GPUs on cuda,
    its cores divided by compute.threads on cpu)."""
    if device_kind(config) == "GPU":
        return {"num_gpus": devices} if devices else {}
    from apsft_dagster.workers.local import cores

    return {"num_cpus": (devices or max(1, cores() // config.compute.threads)) * config.compute.threads}


def connect(config, where: Target) -> str:
    """Join `where.address`, or start a local cluster; returns the address other processes join."""
    import ray

    if not ray.is_initialized():
        quiet = {"log_to_driver": False, "configure_logging": False, "namespace": NAMESPACE}
        if where.address:
            probe(where.address)
            try:
                ray.init(address=where.address, **quiet)
            except (ConnectionError, RuntimeError) as exc:
                raise ClusterError(f"Ray address {where.address}: could not join ({exc})") from None
        else:
            ray.init(include_dashboard=False, object_store_memory=LOCAL_OBJECT_STORE,
                     **local_resources(config, where.devices), **quiet)
    return ray.get_runtime_context().gcs_address


def capacity(config) -> int:
    """How many engine workers the joined cluster can hold at once (0: no device for one)."""
    import ray

    return int(ray.cluster_resources().get(device_kind(config), 0) // worker_need(config))


def require_devices(config, address: str) -> int:
    """`capacity`, or a ClusterError naming what the cluster has when it cannot hold one worker."""
    import ray

    if (n := capacity(config)) < 1:
        kind = device_kind(config)
        raise ClusterError(f"Ray cluster {address}: no {kind} for an engine worker (it has "
                           f"{ {k: v for k, v in ray.cluster_resources().items() if not k.startswith('node:')} }); "
                           + ("add GPU workers, or run compute.device: cpu" if kind == "GPU" else
                              f"each worker holds compute.threads={config.compute.threads} CPUs"))
    return n
