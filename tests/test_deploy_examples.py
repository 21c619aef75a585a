"""The scale-out examples in deploy/, loaded by Dagster's own config machinery (not by hand).

Each instance file passes Dagster's instance schema and builds its run launcher from it; the
Kubernetes one then builds, with dagster-k8s' own code, the Job an engine stage's run would get
(GPU limit, node selector, toleration from the run tags of `apsft_dagster.run_tags`) and the Job
of a CPU stage (none of that); the Docker one's container arguments pass docker-py's own
container-argument builder; the team workspace points at the code server of deploy/Dockerfile.
"""

import json
import shutil

import dagster as dg
import pytest
import yaml
from dagster._core.instance.config import dagster_instance_config
from dagster._serdes import ConfigurableClassData

from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.run_tags import K8S_CONFIG_TAG, gpu_run_tags

DEPLOY = PROJECT_ROOT / "deploy"
PG_ENV = {"APSFT_PG_HOST": "db.example.org", "APSFT_PG_PORT": "5432", "APSFT_PG_USER": "apsft",
          "APSFT_PG_PASSWORD": "secret", "APSFT_PG_DB": "dagster", "APSFT_CODE_IMAGE": "registry.example.org/apsft:1"}
KUBECONFIG = {"apiVersion": "v1", "kind": "Config", "current-context": "t",
              "clusters": [{"name": "t", "cluster": {"server": "https://127.0.0.1:6443"}}],
              "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
              "users": [{"name": "t", "user": {"token": "x"}}]}


@pytest.fixture
def env(monkeypatch):
    for name, value in PG_ENV.items():
        monkeypatch.setenv(name, value)


def _validated(tmp_path, example: str) -> dict:
    """The example's instance config after Dagster's schema validation (raises on any error)."""
    home = tmp_path / example
    home.mkdir()
    shutil.copy(DEPLOY / example / "dagster.yaml", home / "dagster.yaml")
    config, _ = dagster_instance_config(str(home))
    return dict(config)


def _launcher(config: dict, **overrides):
    launcher = config["run_launcher"]
    data = ConfigurableClassData(launcher["module"], launcher["class"],
                                 yaml.safe_dump({**launcher["config"], **overrides}))
    return data.rehydrate(object)


def _job_tags(name: str, environ: dict | None = None) -> dict:
    """A stage job's tags as the code location builds them with `environ` (e.g. a DAGSTER_HOME)."""
    from apsft_dagster.experiment.stages import STAGES
    from apsft_dagster.stage import stage_jobs

    return dict(next(j for j in stage_jobs(STAGES, environ or {}) if j.name == name).tags)


def _k8s_home(tmp_path) -> dict:
    home = tmp_path / "k8s_home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(DEPLOY / "k8s" / "dagster.yaml", home / "dagster.yaml")
    return {"DAGSTER_HOME": str(home)}


def _k8s_pod(launcher, tags: dict):
    from dagster_k8s.container_context import K8sContainerContext
    from dagster_k8s.job import construct_dagster_k8s_job

    run = dg.DagsterRun(job_name="trace_bank_job", run_id="0" * 36, tags=tags)
    context = K8sContainerContext.create_for_run(run, launcher, include_run_tags=True)
    job = construct_dagster_k8s_job(context.get_k8s_job_config(job_image=None, run_launcher=launcher),
                                    args=["dagster", "api", "execute_run"], job_name="apsft-run",
                                    user_defined_k8s_config=context.run_k8s_config, component="run_worker")
    return job.spec.template.spec


def test_kubernetes_example_builds_gpu_pods_for_engine_stages_only(env, tmp_path):
    from dagster_k8s import K8sRunLauncher

    config = _validated(tmp_path, "k8s")
    assert config["concurrency"]["pools"]["default_limit"] >= 1
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(KUBECONFIG))
    # in-cluster credentials exist only in a pod; everything else is the file as shipped
    launcher = _launcher(config, load_incluster_config=False, kubeconfig_file=str(kubeconfig))
    assert isinstance(launcher, K8sRunLauncher) and launcher.job_image == PG_ENV["APSFT_CODE_IMAGE"]

    engine = _k8s_pod(launcher, _job_tags("trace_bank_job", _k8s_home(tmp_path)))
    (container,) = engine.containers
    assert container.image == PG_ENV["APSFT_CODE_IMAGE"]
    assert container.resources.limits["nvidia.com/gpu"] == "1"
    assert container.resources.requests == {"cpu": "2", "memory": "8Gi"}  # run_k8s_config, merged under the tag
    assert engine.node_selector == {"nvidia.com/gpu.present": "true"}
    assert [t.key for t in engine.tolerations] == ["nvidia.com/gpu"]
    assert {v.name for v in engine.volumes} == {"store", "models"} and engine.service_account_name == "apsft-runs"

    cpu = _k8s_pod(launcher, _job_tags("evidence_seal_job", _k8s_home(tmp_path / "cpu")))
    assert "nvidia.com/gpu" not in (cpu.containers[0].resources.limits or {})
    assert not cpu.node_selector


def test_gpu_run_tags_follow_the_environment_and_refuse_nonsense():
    tags = gpu_run_tags({"APSFT_GPUS_PER_RUN": "8", "APSFT_GPU_NODE_SELECTOR": "pool=h100"})
    config = json.loads(tags[K8S_CONFIG_TAG])
    assert config["container_config"]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert config["pod_spec_config"]["node_selector"] == {"pool": "h100"}
    with pytest.raises(ValueError, match="APSFT_GPUS_PER_RUN"):
        gpu_run_tags({"APSFT_GPUS_PER_RUN": "0"})
    with pytest.raises(ValueError, match="label=value"):
        gpu_run_tags({"APSFT_GPU_NODE_SELECTOR": "h100"})



def test_the_kubernetes_tag_is_on_engine_stages_only_where_the_kubernetes_launcher_is_configured(tmp_path):
    from apsft_dagster.core.paths import LOCAL_INSTANCE_YAML

    engine_jobs = ("trace_bank_job", "score_bank_job", "adapters_job", "stage_a_generations_job")
    k8s = _k8s_home(tmp_path)
    assert all(_job_tags(j, k8s) == {"apsft/engine": "true", K8S_CONFIG_TAG: gpu_run_tags({})[K8S_CONFIG_TAG]}
               for j in engine_jobs)
    assert _job_tags("sft_arms_job", k8s) == {}
    local = tmp_path / "local"
    local.mkdir()
    (local / "dagster.yaml").write_text(LOCAL_INSTANCE_YAML)  # what `apsft run` creates
    for environ in ({"DAGSTER_HOME": str(local)}, {}):  # the local instance, or none at all
        assert all(_job_tags(j, environ) == {"apsft/engine": "true"} for j in engine_jobs)
        assert _job_tags("sft_arms_job", environ) == {}
    in_a_pod = {"DAGSTER_HOME": str(local), "KUBERNETES_SERVICE_HOST": "10.0.0.1"}  # the code server's pod
    assert K8S_CONFIG_TAG in _job_tags("trace_bank_job", in_a_pod) and _job_tags("sft_arms_job", in_a_pod) == {}


def test_engine_runs_on_a_ray_cluster_ask_kubernetes_for_no_gpu(tmp_path):
    """With RAY_ADDRESS the run pod is a Ray client (deploy/k8s/raycluster.yaml holds the GPUs): the
    engine stage keeps its mark and loses only the GPU request; CPU stages are unchanged."""
    in_a_pod = {**_k8s_home(tmp_path), "KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert K8S_CONFIG_TAG in _job_tags("trace_bank_job", in_a_pod)
    on_ray = {**in_a_pod, "RAY_ADDRESS": "ray://apsft-ray-head-svc.apsft.svc:10001"}
    assert _job_tags("trace_bank_job", on_ray) == {"apsft/engine": "true"}
    assert _job_tags("sft_arms_job", on_ray) == {}


def test_docker_example_gives_run_containers_the_gpus_and_the_store(env, tmp_path):
    from dagster_docker import DockerRunLauncher
    from docker.models.containers import _create_container_args

    config = _validated(tmp_path, "docker")
    launcher = _launcher(config)
    assert isinstance(launcher, DockerRunLauncher) and launcher.image == PG_ENV["APSFT_CODE_IMAGE"]
    assert "APSFT_PG_PASSWORD" in launcher.env_vars
    # the arguments DockerRunLauncher passes to containers.create, through docker-py's own builder
    args = _create_container_args({"image": launcher.image, "command": ["dagster"], "version": "1.44",
                                   **launcher.container_kwargs})
    host = args["host_config"]
    assert host["DeviceRequests"][0]["Capabilities"] == [["gpu"]] and host["DeviceRequests"][0]["Count"] == -1
    assert "/srv/apsft/store:/store" in host["Binds"] and "/srv/apsft/models:/models:ro" in host["Binds"]


def test_team_workspace_points_at_the_code_server_of_the_dockerfile():
    from dagster._core.workspace.load import location_origins_from_yaml_paths

    (origin,) = location_origins_from_yaml_paths([str(DEPLOY / "workspace.yaml")])
    assert (origin.location_name, origin.host, origin.port) == ("apsft", "apsft-code", 4000)
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert '"-p", "4000"' in dockerfile and '"--location-name", "apsft"' in dockerfile
    assert "apsft_dagster.definitions" in dockerfile


def test_a_broken_example_is_refused_by_the_same_machinery(env, tmp_path):
    """The validation can fail: a misspelt launcher field is refused by Dagster's schema."""
    config = _validated(tmp_path, "docker")
    with pytest.raises(Exception, match="contaner_kwargs|container_kwargs"):
        _launcher(config, contaner_kwargs={"shm_size": "1g"})
