"""Run tags: one run over a range of partitions, the runner's mark, and engine stages asking
Kubernetes for GPUs where the Kubernetes launcher is configured.

A local run carries at most two tags of ours: `apsft/runner` (the `apsft run` process that
executes it; such runs are alerted and recovered by the runner) and, on an engine stage,
`apsft/engine: true` (a team instance limits engine runs by it).

dagster-k8s reads `dagster-k8s/config` from a run's tags and merges it into the run's pod
(deploy/k8s/dagster.yaml); other launchers ignore it. The GPU count and the node label come from
the environment of the process that loads the definitions (the code server), so a team sets
them once per deployment: `APSFT_GPUS_PER_RUN` (default 1) and `APSFT_GPU_NODE_SELECTOR`
(`label=value`, default `nvidia.com/gpu.present=true`, the label NVIDIA's GPU feature discovery
puts on GPU nodes).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from apsft_dagster.core.ray_settings import ADDRESS_ENV as RAY_ADDRESS_ENV

K8S_CONFIG_TAG = "dagster-k8s/config"
RUNNER_TAG = "apsft/runner"  # host:pid:start time of the `apsft run` process that executes the run
ENGINE_TAG = "apsft/engine"


def kubernetes_launcher(environ: Mapping[str, str] = os.environ) -> bool:
    """True when this process runs in a Kubernetes pod (`KUBERNETES_SERVICE_HOST`, set in every
    pod: a code server there serves runs the K8s launcher starts) or the instance it loads
    ($DAGSTER_HOME/dagster.yaml) launches runs with dagster-k8s; only then do engine stages carry
    the `dagster-k8s/config` tag."""
    import yaml

    if environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    home = environ.get("DAGSTER_HOME")
    settings = os.path.join(home, "dagster.yaml") if home else None
    if not settings or not os.path.isfile(settings):
        return False
    with open(settings) as fh:
        launcher = (yaml.safe_load(fh) or {}).get("run_launcher") or {}
    return str(launcher.get("module", "")).startswith("dagster_k8s")


def engine_tags(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """An engine stage job's tags (a CPU stage's carry none): the mark, and the request for its GPUs
    where runs launch on Kubernetes, unless the stages compute on a Ray cluster (RAY_ADDRESS set: the
    run pod is then a client that holds no model, deploy/k8s/raycluster.yaml)."""
    gpus = kubernetes_launcher(environ) and not environ.get(RAY_ADDRESS_ENV)
    return {ENGINE_TAG: "true", **(gpu_run_tags(environ) if gpus else {})}


def gpu_run_tags(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    gpus = environ.get("APSFT_GPUS_PER_RUN", "1")
    if not gpus.isdigit() or int(gpus) < 1:
        raise ValueError(f"APSFT_GPUS_PER_RUN={gpus!r}: must be a whole number of GPUs, 1 or more")
    selector = environ.get("APSFT_GPU_NODE_SELECTOR", "nvidia.com/gpu.present=true")
    label, equals, value = selector.partition("=")
    if not (label and equals and value):
        raise ValueError(f"APSFT_GPU_NODE_SELECTOR={selector!r}: must be label=value, "
                         "e.g. nvidia.com/gpu.present=true")
    config = {
        "container_config": {"resources": {"limits": {"nvidia.com/gpu": gpus}}},
        "pod_spec_config": {"node_selector": {label: value},
                            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }
    return {K8S_CONFIG_TAG: json.dumps(config, sort_keys=True)}


def single_run_tags(keys: list[str]) -> dict[str, str]:
    """Run tags that make one run cover the key range first..last (a single-run backfill); one key
    is a plain partition run."""
    if len(keys) == 1:
        return {"dagster/partition": keys[0]}
    return {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
