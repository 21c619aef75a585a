"""The engine stages' partitions on a real local Ray cluster (workers/ray_pool.py, issue 59): the bytes
of 1, 2 and 4 workers equal the one-process run's (README command 1's store), a worker killed mid-partition
and a node removed mid-stage cost only that partition, and a cluster without a device is refused at once.

Each test re-makes shards that command 1 made, on a copy of its store, and compares them byte for byte with
the originals: each partition's bytes depend on that partition alone, whichever worker computes it."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from apsft_dagster.core.config import load_config  # noqa: E402
from apsft_dagster.core.errors import ClusterError  # noqa: E402
from apsft_dagster.core.layout import SCORE_BANK, TRACE_BANK, key_file, shard_file  # noqa: E402
from apsft_dagster.core.leftovers import TEMP  # noqa: E402
from apsft_dagster.core.store import Store  # noqa: E402
from apsft_dagster.experiment.assets.score_bank import score_worker  # noqa: E402
from apsft_dagster.experiment.assets.trace_bank import harvest_worker  # noqa: E402
from apsft_dagster.resources import ExperimentResource  # noqa: E402
from apsft_dagster.workers.cluster import Target, require_devices  # noqa: E402
from apsft_dagster.workers.ray_pool import RayShare  # noqa: E402

# a copy of the run; one worker runs them in turn (each cluster holds the machine's two cores)
pytestmark = [pytest.mark.after_the_run, pytest.mark.xdist_group("ray")]
QUIET = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False,
         "object_store_memory": 128 << 20}


@pytest.fixture(scope="module")
def local_ray():
    """One local cluster of four simulated CPUs and four simulated GPUs for the module's tests (`RayShare`
    joins the one running); the node test, last, makes its own."""
    ray.shutdown()
    ray.init(num_cpus=4, num_gpus=4, **QUIET)
    yield
    ray.shutdown()


def _copy(cli_run, tmp_path, bank: str, tasks: list[str]) -> tuple[ExperimentResource, Store, dict[str, bytes]]:
    """A copy of command 1's store without `tasks`' shards and keys of `bank`; returns what they were."""
    _, source, _ = cli_run
    shutil.copytree(source.root, tmp_path / "store")
    store = Store(tmp_path / "store")
    made = {name: store.path(name).read_bytes() for t in tasks for name in (shard_file(bank, t), key_file(bank, t))}
    _forget(store, made)
    return ExperimentResource(profile="smoke", store_dir=str(store.root)), store, made


def _forget(store: Store, made: dict[str, bytes]) -> None:
    for name in made:
        store.remove(name)
    assert not any(store.exists(name) for name in made)


def _temps(store: Store) -> list[str]:
    return [p.name for p in store.root.rglob("*") if TEMP.match(p.name)]


def _run(share: RayShare, tasks: list[str]) -> None:
    share.expect(tasks).open()
    for task in tasks:  # in the step's order, as fill_shards asks
        assert share.result(task)["action"] == ("scored" if share.name == "score_bank" else "generated")


def test_score_shards_equal_command_1s_on_1_2_and_4_workers(cli_run, tmp_path, local_ray):
    tasks = ["caravan-L1-000", "caravan-L2-001", "foundry_ledger-L1-001", "foundry_ledger-L3-000",
             "runeward-L1-000", "runeward-L2-001", "runeward-L3-000", "runeward-L3-001"]
    experiment, store, made = _copy(cli_run, tmp_path, SCORE_BANK, tasks)
    for devices in (1, 2, 4):
        ran = tasks[:2] if devices == 1 else tasks  # one worker takes them in turn: two show it
        _forget(store, made)
        share = RayShare("score_bank", score_worker, experiment, {"batch_size": 16}, Target(None, devices))
        _run(share, ran)
        remade = {name: made[name] for t in ran for name in (shard_file(SCORE_BANK, t), key_file(SCORE_BANK, t))}
        assert {name: store.path(name).read_bytes() for name in remade} == remade, devices
        workers = {share.placed(t)["worker"] for t in ran}
        assert 1 <= len(workers) <= devices and (devices == 1 or len(workers) >= 2), (devices, workers)
        assert {share.placed(t)["pid"] for t in ran} <= {w["pid"] for w in share._where_of.values()}
        assert _temps(store) == []
    deadline = time.monotonic() + 10  # each pool stopped its workers once its last partition was in
    while ray.available_resources().get("CPU", 0) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.available_resources().get("CPU", 0) == 4


def _kill_once_busy(share: RayShare, kill) -> threading.Thread:
    """Once a worker has computed for a second, `kill(where)` it (in a thread, while the step waits)."""
    def watch():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            busy = [share._where_of.get(worker) for worker, _ in list(share._busy.values())]
            if busy and busy[0]:
                time.sleep(1.0)
                kill(busy[0])
                return
            time.sleep(0.05)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_worker_killed_mid_partition_costs_only_that_partition(cli_run, tmp_path, local_ray):
    tasks = ["caravan-L1-000", "runeward-L3-001"]  # one each: the killed one's partition goes to the other
    experiment, store, made = _copy(cli_run, tmp_path, TRACE_BANK, tasks)
    share = RayShare("trace_bank", harvest_worker, experiment, None, Target(None, 2))
    killed = []
    watcher = _kill_once_busy(share, lambda where: (killed.append(where), os.kill(where["pid"], signal.SIGKILL)))
    _run(share.expect(tasks), tasks)
    watcher.join(5)
    assert killed and sum(share._attempts.values()) == 1, (killed, share._attempts)
    assert {name: store.path(name).read_bytes() for name in made} == made
    assert killed[0]["pid"] not in {share.placed(t)["pid"] for t in tasks}
    assert _temps(store) == []


def test_a_cluster_without_a_device_is_refused_naming_what_it_has(local_ray, monkeypatch):
    smoke = load_config("smoke")
    wide = smoke.model_copy(update={"compute": smoke.compute.model_copy(update={"threads": 8})})
    with pytest.raises(ClusterError, match=r"no CPU for an engine worker \(it has .*'CPU': 4\.0.*each worker holds "
                                           r"compute\.threads=8 CPUs"):
        require_devices(wide, "here")  # four CPUs: not one worker of eight threads
    gpu = smoke.model_copy(update={"compute": smoke.compute.model_copy(update={"device": "cuda"})})
    assert require_devices(gpu, "here") == 4
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 4.0, "memory": 1.0})  # a cluster of CPUs only
    with pytest.raises(ClusterError, match="no GPU for an engine worker .* add GPU workers"):
        require_devices(gpu, "here")


def test_a_stage_waiting_for_a_device_says_so_at_once_and_when_it_got_one(cli_run, tmp_path, local_ray, capsys):
    experiment, store, made = _copy(cli_run, tmp_path, SCORE_BANK, ["caravan-L1-000"])

    @ray.remote(num_cpus=4)
    class Holder:  # another run's work, holding every CPU of the cluster
        def ping(self):
            return True
    holder = Holder.remote()
    ray.get(holder.ping.remote())
    began = time.monotonic()
    threading.Timer(2.0, lambda: ray.kill(holder)).start()
    share = RayShare("score_bank", score_worker, experiment, {"batch_size": 16}, Target(None, 1))
    _run(share, ["caravan-L1-000"])
    said = capsys.readouterr().err
    assert "score_bank (ray): waiting for a CPU from Ray for 1 workers (the cluster's 4 are held by other work) " \
           "since " in said, said
    assert "score_bank (ray): got a CPU from Ray for 1 workers" in said and time.monotonic() - began >= 2.0
    assert store.path(shard_file(SCORE_BANK, "caravan-L1-000")).read_bytes() == made[
        shard_file(SCORE_BANK, "caravan-L1-000")]


def test_a_worker_that_cannot_build_its_work_fails_the_stage_at_once(tmp_path, local_ray):
    empty = ExperimentResource(profile="smoke", store_dir=str(tmp_path / "empty"))  # no task catalog to read
    share = RayShare("trace_bank", harvest_worker, empty, None, Target(None, 1))
    began = time.monotonic()
    built = r"trace_bank: an engine worker could not build its work: MissingArtifactError: \S*task_catalog\.parquet"
    with pytest.raises(ClusterError, match=built):
        share.expect(["caravan-L1-000", "caravan-L1-001"]).open().result("caravan-L1-000")
    assert time.monotonic() - began < 60 and share._all == []  # every worker stopped, none started again


def test_on_cuda_each_worker_holds_one_gpu_of_a_simulated_four(tmp_path, cli_run, local_ray):
    """Ray with four simulated GPUs, two held by other work: a CUDA profile's workers ask one each, so Ray
    gives each its own of the two left (CUDA_VISIBLE_DEVICES), and a third waits. Nothing computes (no CUDA
    here): only placement is read."""
    from tests.conftest import variant_config

    cuda = variant_config(tmp_path, lambda raw: raw["compute"].update(device="cuda"))
    _, source, _ = cli_run
    experiment = ExperimentResource(profile="smoke", config_path=str(cuda), store_dir=str(source.root))
    assert require_devices(experiment.config(), "here") == 4

    @ray.remote(num_gpus=2, num_cpus=0)
    class Other:  # another run's work on two of the four GPUs
        def gpus(self):
            return sorted(str(g) for g in ray.get_gpu_ids())
    other = Other.remote()
    held = ray.get(other.gpus.remote())
    share = RayShare("trace_bank", harvest_worker, experiment, None, Target(None, 3))
    share.expect([f"task-{i}" for i in range(3)])
    deadline = time.monotonic() + 60
    while len(share._where_of) < 2 and time.monotonic() < deadline:
        share._pump()
    assert sorted(w["gpu"] for w in share._where_of.values()) == sorted({"0", "1", "2", "3"} - set(held))
    assert len(share._starting) == 1 and ray.available_resources().get("GPU", 0) == 0  # the third waits
    share.close()
    ray.kill(other)


def test_a_node_removed_mid_stage_costs_only_its_partition(cli_run, tmp_path):
    """Last in the module: it ends the module's cluster for a two-node one of its own."""
    from ray.cluster_utils import Cluster

    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                              "object_store_memory": 128 << 20})
    nodes = [cluster.add_node(num_cpus=1, object_store_memory=128 << 20) for _ in range(2)]
    try:
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        tasks = ["caravan-L2-000", "runeward-L2-000"]
        experiment, store, made = _copy(cli_run, tmp_path, TRACE_BANK, tasks)
        share = RayShare("trace_bank", harvest_worker, experiment, None, Target(cluster.address, 2))
        removed = []

        def remove(where):
            node = next(n for n in nodes if n.node_id.startswith(where["node"]))
            removed.append(where)
            cluster.remove_node(node)
        watcher = _kill_once_busy(share, remove)
        _run(share.expect(tasks), tasks)
        watcher.join(5)
        assert removed and sum(share._attempts.values()) == 1
        assert {name: store.path(name).read_bytes() for name in made} == made
        assert {share.placed(t)["node"] for t in tasks} == {n.node_id[:8] for n in nodes} - {removed[0]["node"]}
        assert _temps(store) == []
    finally:
        ray.shutdown()
        cluster.shutdown()
