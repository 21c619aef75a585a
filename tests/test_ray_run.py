"""`apsft run --ray [ADDRESS] [--devices N]` (issue 59): a stage's partitions spread over a local cluster's
workers, each partition's metadata naming its worker and node, the bytes command 1's; an address nobody
answers at, a bad one, or a missing Ray, refused in seconds with nothing written."""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time

import dagster as dg
import pytest

from apsft_dagster.cli.experiment import scale
from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import ClusterError
from apsft_dagster.core.layout import SCORE_BANK, key_file, shard_file
from apsft_dagster.core.paths import PROJECT_ROOT, store_instance
from apsft_dagster.core.store import Store
from apsft_dagster.experiment.partitions import train_task_partitions
from apsft_dagster.workers.cluster import probe


def _apsft(tmp_path, *args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APSFT_", "DAGSTER", "RAY_"))}
    env.update(APSFT_STATE_DIR=str(tmp_path / "state"))
    return subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "run", *args], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_nobody_answers_at_is_refused_in_seconds_and_nothing_is_written(tmp_path):
    pytest.importorskip("ray")
    began = time.monotonic()
    refused = _apsft(tmp_path, "--ray", f"127.0.0.1:{_free_port()}", "--store", str(tmp_path / "store"))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "nothing answers there" in refused.stderr and "ray start --head" in refused.stderr
    assert time.monotonic() - began < 30
    assert not (tmp_path / "store").exists() and not (tmp_path / "state" / "instances").exists()


@pytest.mark.parametrize("address, said", [
    ("nohost", "use host:port"),
    ("127.0.0.1:FREE", "nothing answers there"),  # a port free when the test runs (each xdist worker collects alike)
])
def test_probe_names_the_address_and_the_way_out(address, said):
    address = address.replace("FREE", str(_free_port()))
    began = time.monotonic()
    with pytest.raises(ClusterError, match=said):
        probe(address)
    assert time.monotonic() - began < 5


def test_devices_below_one_and_a_missing_ray_are_refused(monkeypatch):
    config = load_config("smoke")
    with pytest.raises(ClusterError, match="--devices 0: give at least one worker"):
        scale.join(argparse.Namespace(ray=None, devices=0), config)
    monkeypatch.setitem(sys.modules, "ray", None)  # as where the `ray` extra is not installed
    with pytest.raises(ClusterError, match=r"Ray is not installed.*\.\[ray\]"):
        scale.join(argparse.Namespace(ray=scale.LOCAL, devices=2), config)
    assert scale.join(argparse.Namespace(ray=None, devices=None), config) is None  # no Ray asked for


@pytest.mark.after_the_run
@pytest.mark.xdist_group("ray")
def test_score_bank_on_two_workers_spreads_and_equals_command_1(cli_run, tmp_path):
    pytest.importorskip("ray")
    _, source, _ = cli_run
    shutil.copytree(source.root, tmp_path / "store")
    store = Store(tmp_path / "store")
    tasks = train_task_partitions.get_partition_keys()[:6]  # six in a row: one run (a key range), two workers
    made = {n: store.path(n).read_bytes() for t in tasks for n in (shard_file(SCORE_BANK, t), key_file(SCORE_BANK, t))}
    for name in made:
        store.remove(name)
    ran = _apsft(tmp_path, "--from", "score_bank_job", "--to", "score_bank_job", "--devices", "2",
                 "--partitions", f"score_bank_job={','.join(tasks)}", "--store", str(store.root))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "(started here): 2 CPU (1 threads each) workers per engine stage, room for 2" in ran.stdout
    assert {n: store.path(n).read_bytes() for n in made} == made
    instance = dg.DagsterInstance.from_ref(
        dg._core.instance.ref.InstanceRef.from_dir(str(store_instance(store.root, tmp_path / "state"))))
    try:
        events = instance.get_event_records(dg.EventRecordsFilter(
            dg.DagsterEventType.ASSET_MATERIALIZATION, asset_key=dg.AssetKey(SCORE_BANK)))
        placed = {e.event_log_entry.dagster_event.partition:
                  e.event_log_entry.asset_materialization.metadata for e in events}
    finally:
        instance.dispose()
    assert set(placed) == set(tasks)
    workers = {m["worker"].value for m in placed.values()}
    assert len(workers) == 2 and all({"node", "host", "pid"} <= set(m) for m in placed.values())
