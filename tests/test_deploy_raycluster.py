"""deploy/k8s/raycluster.yaml, checked by the machinery a cluster would use (not by hand).

The RayCluster passes the `v1` OpenAPI schema of KubeRay's own CRD (vendored: tests/data/kuberay/, the
blob id recomputed here) with the API server's strict field validation (an unknown field is refused, as
`kubectl apply --validate=strict` does); every pod template (the head's, each worker group's) loads into the
Kubernetes client's `V1PodTemplateSpec` and the store's claim into `V1PersistentVolumeClaim`, with
client-side validation on. Then what the deployment needs: GPUs on the workers only, as many Ray GPUs as
Kubernetes GPUs, the store mounted where deploy/k8s/dagster.yaml's run pods mount it on a ReadWriteMany
claim, every pod on one image with the Ray of the `ray` extra, GPU nodes chosen as the engine run pods'.
Planted bad manifests show each check can fail.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import re
import tomllib

import jsonschema
import pytest
import yaml
from kubernetes import client

from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.run_tags import K8S_CONFIG_TAG, gpu_run_tags

MANIFEST = PROJECT_ROOT / "deploy" / "k8s" / "raycluster.yaml"
CRD = PROJECT_ROOT / "tests" / "data" / "kuberay" / "ray.io_rayclusters.yaml.gz"
CRD_BLOB = "ff0be58ada3bd457605eff1f258c16df21e61e21"  # kuberay v1.7.0's ray.io_rayclusters.yaml (README there)
GPU = "nvidia.com/gpu"


def _strict(schema):
    """The schema as the API server applies it with fieldValidation=Strict: no field it does not know."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strict(value) for key, value in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    raw = gzip.decompress(CRD.read_bytes())
    assert hashlib.sha1(b"blob %d\0" % len(raw) + raw).hexdigest() == CRD_BLOB  # the file KubeRay ships
    crd = yaml.safe_load(raw)
    assert (crd["kind"], crd["spec"]["group"], crd["spec"]["names"]["kind"]) == (
        "CustomResourceDefinition", "ray.io", "RayCluster")
    (v1,) = [version for version in crd["spec"]["versions"] if version["name"] == "v1"]
    return jsonschema.Draft7Validator(_strict(v1["schema"]["openAPIV3Schema"]))


def _documents() -> dict[str, dict]:
    """kind -> document of the manifest (one of each)."""
    docs = [doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc]
    assert len({doc["kind"] for doc in docs}) == len(docs)
    return {doc["kind"]: doc for doc in docs}


def _deserialize(obj: dict, kind: str):
    """The object as the Kubernetes client's model (`kind`), through ApiClient.deserialize: raises
    ValueError on a missing required field (a container without a name, a pod without containers)."""
    class Response:
        data = json.dumps(obj)
    return client.ApiClient().deserialize(Response(), kind)


def _launcher_store() -> tuple[str, str]:
    """(mount path, claim) of the `store` volume the run pods of deploy/k8s/dagster.yaml get."""
    config = yaml.safe_load((PROJECT_ROOT / "deploy" / "k8s" / "dagster.yaml").read_text())["run_launcher"]["config"]
    (mount,) = [m for m in config["volume_mounts"] if m["name"] == "store"]
    (volume,) = [v for v in config["volumes"] if v["name"] == "store"]
    return mount["mountPath"], volume["persistentVolumeClaim"]["claimName"]


def schema_problems(validator, cluster: dict) -> list[str]:
    return sorted(f"{'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
                  for error in validator.iter_errors(cluster))


def _pod_problems(name: str, group: dict, store: tuple[str, str], claim_modes: dict) -> list[str]:
    """What one group's pod lacks: GPUs (workers only, equal to Ray's num-gpus), the shared store."""
    pod = _deserialize(group["template"], "V1PodTemplateSpec").spec
    problems = []
    limits = [c.resources.limits.get(GPU) if c.resources and c.resources.limits else None for c in pod.containers]
    declared = group.get("rayStartParams", {}).get("num-gpus")
    if name == "head":
        if any(limits) or declared != "0":
            problems.append(f"head: holds GPUs (limits {limits}, num-gpus {declared}); it only schedules")
    elif not limits[0] or limits[0] != declared:
        problems.append(f"{name}: {GPU} limit {limits[0]} and rayStartParams num-gpus {declared} must be equal")
    claims = {v.name: v.persistent_volume_claim.claim_name for v in pod.volumes or [] if v.persistent_volume_claim}
    mounts = {m.name: m.mount_path for m in pod.containers[0].volume_mounts or []}
    store_claims = [volume for volume, claim in claims.items() if claim == store[1]]
    if not store_claims or mounts.get(store_claims[0]) != store[0]:
        problems.append(f"{name}: the claim {store[1]} is not mounted at {store[0]} (the run pods' store)")
    if claim_modes.get(store[1]) != ["ReadWriteMany"]:
        problems.append(f"{name}: the claim {store[1]} is {claim_modes.get(store[1])}, not ReadWriteMany")
    return problems


def deployment_problems(docs: dict[str, dict]) -> list[str]:
    """What the deployment needs of the manifest beyond the schema (docs/deployment.md)."""
    cluster = docs["RayCluster"]["spec"]
    groups = {"head": cluster["headGroupSpec"], **{g["groupName"]: g for g in cluster.get("workerGroupSpecs", [])}}
    claim = docs.get("PersistentVolumeClaim")
    claim_modes = {}
    if claim:
        pvc = _deserialize(claim, "V1PersistentVolumeClaim")
        claim_modes[pvc.metadata.name] = pvc.spec.access_modes
    problems = [p for name, group in groups.items() for p in _pod_problems(name, group, _launcher_store(), claim_modes)]
    if len(groups) < 2:
        problems.append("no worker group: nothing for the engine workers to run on")
    images = {c["image"] for g in groups.values() for c in g["template"]["spec"]["containers"]}
    if len(images) != 1 or not next(iter(images)).startswith("registry.example.org/apsft:"):
        problems.append(f"images {sorted(images)}: every pod runs the run pods' image (APSFT_CODE_IMAGE)")
    (ray_pin,) = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["ray"]
    if f"ray=={cluster.get('rayVersion')}" != ray_pin:
        problems.append(f"rayVersion {cluster.get('rayVersion')!r}: the image's Ray is {ray_pin}")
    return problems


def test_the_raycluster_passes_kuberays_own_schema_strictly(validator):
    docs = _documents()
    assert set(docs) == {"RayCluster", "PersistentVolumeClaim"}
    assert (docs["RayCluster"]["apiVersion"], docs["RayCluster"]["kind"]) == ("ray.io/v1", "RayCluster")
    assert schema_problems(validator, docs["RayCluster"]) == []


def test_the_pods_have_the_gpus_the_store_and_the_image():
    docs = _documents()
    assert deployment_problems(docs) == []
    spec = docs["RayCluster"]["spec"]
    (workers,) = spec["workerGroupSpecs"]
    pod = _deserialize(workers["template"], "V1PodTemplateSpec").spec
    assert pod.containers[0].resources.limits[GPU] == workers["rayStartParams"]["num-gpus"] == "8"
    assert workers["minReplicas"] <= workers["replicas"] <= workers["maxReplicas"]
    # the GPU nodes the engine run pods would get (run_tags.gpu_run_tags' defaults)
    tag = json.loads(gpu_run_tags({})[K8S_CONFIG_TAG])["pod_spec_config"]
    assert pod.node_selector == tag["node_selector"]
    assert [client.ApiClient().sanitize_for_serialization(t) for t in pod.tolerations] == tag["tolerations"]
    assert {m.mount_path: m.read_only for m in pod.containers[0].volume_mounts} == {
        "/store": None, "/models": True, "/dev/shm": None}
    dockerfile = (PROJECT_ROOT / "deploy" / "Dockerfile").read_text()
    assert re.search(r'pip install [^\n]*-e "\.\[[^\]]*\bray\b', dockerfile)  # the image holds Ray


def _mutate(path: str, value=None, rename: str | None = None) -> dict:
    """The manifest's RayCluster with the field at `path` (dots; numbers index lists) set, renamed or removed."""
    cluster = copy.deepcopy(_documents()["RayCluster"])
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = cluster
    for key in parents:
        node = node[key]
    if rename:
        node[rename] = node.pop(last)
    elif value is None:
        del node[last]
    else:
        node[last] = value
    return cluster


@pytest.mark.parametrize("path, value, rename, expected", [
    ("spec.workerGroupSpecs", None, "workerGroupSpec",
     "spec: Additional properties are not allowed ('workerGroupSpec' was unexpected)"),
    ("spec.workerGroupSpecs.0.rayStartParams.num-gpus", 8, None,
     "spec.workerGroupSpecs.0.rayStartParams.num-gpus: 8 is not of type 'string'"),
    ("spec.workerGroupSpecs.0.replicas", "1", None, "spec.workerGroupSpecs.0.replicas: '1' is not of type 'integer'"),
    ("spec.workerGroupSpecs.0.groupName", None, None, "spec.workerGroupSpecs.0: 'groupName' is a required property"),
    ("spec.headGroupSpec.template.spec.containers.0.resources.limits", None, "limit",
     "spec.headGroupSpec.template.spec.containers.0.resources: Additional properties are not allowed "
     "('limit' was unexpected)"),
])
def test_a_planted_bad_raycluster_is_refused_by_the_schema(validator, path, value, rename, expected):
    assert schema_problems(validator, _mutate(path, value, rename)) == [expected]


@pytest.mark.parametrize("path, value, rename, expected", [
    ("spec.workerGroupSpecs.0.rayStartParams.num-gpus", "4", None,
     "gpu: nvidia.com/gpu limit 8 and rayStartParams num-gpus 4 must be equal"),
    ("spec.headGroupSpec.template.spec.containers.0.resources.limits", {"memory": "16Gi", GPU: "1"}, None,
     "head: holds GPUs (limits ['1'], num-gpus 0)"),
    ("spec.workerGroupSpecs.0.template.spec.containers.0.volumeMounts.0.mountPath", "/data", None,
     "gpu: the claim apsft-store is not mounted at /store"),
    ("spec.headGroupSpec.template.spec.containers.0.image", "rayproject/ray:2.60.0-gpu", None,
     "images ['rayproject/ray:2.60.0-gpu', 'registry.example.org/apsft:gpu']: every pod runs the run pods' image"),
    ("spec.rayVersion", "2.52.0", None, "rayVersion '2.52.0': the image's Ray is ray=="),
])
def test_a_planted_bad_deployment_is_named(validator, path, value, rename, expected):
    docs = {**_documents(), "RayCluster": _mutate(path, value, rename)}
    assert schema_problems(validator, docs["RayCluster"]) == []  # schema-valid: only the deployment check sees it
    (problem,) = deployment_problems(docs)
    assert problem.startswith(expected), problem


def test_a_read_write_once_store_and_a_nameless_container_are_refused():
    docs = _documents()
    docs["PersistentVolumeClaim"]["spec"]["accessModes"] = ["ReadWriteOnce"]
    assert deployment_problems(docs) == [f"{name}: the claim apsft-store is ['ReadWriteOnce'], not ReadWriteMany"
                                         for name in ("head", "gpu")]
    docs = {**_documents(), "RayCluster": _mutate("spec.workerGroupSpecs.0.template.spec.containers.0.name")}
    with pytest.raises(ValueError, match="Invalid value for `name`, must not be `None`"):
        deployment_problems(docs)
