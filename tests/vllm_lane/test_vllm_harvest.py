"""`harvest.backend: vllm` on CPU through the project itself (`apsft run`, in fresh processes):
a few train tasks harvested by vLLM, then the parity gate of the protocol, vLLM's instrument
against the reference. One process harvests a store straight through; a second resumes a store
that a stopped run left with part of the bank: it keeps those shards, generates the rest, and the
two stores' banks, summaries and parity receipts are byte-identical."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from apsft_dagster.core.config import load_config
from apsft_dagster.core.layout import PARITY_GATE, TRACE_BANK, key_file, shard_file, summary_file
from apsft_dagster.core.parity import METRICS
from apsft_dagster.core.paths import CONFIG_DIR, PROJECT_ROOT
from apsft_dagster.core.store import RECEIPT_SUFFIX, Store, dir_digests
from apsft_dagster.core.tasks.catalog import train_task_ids

FIRST_PART = 4  # train-task shards the stopped run left behind


@pytest.fixture(scope="module")
def profile(lane, tmp_path_factory) -> Path:
    """smoke_vllm on the handed-over base model (a local snapshot: nothing is built here), with
    nine train tasks (one per cell) so the lane stays short."""
    path = tmp_path_factory.mktemp("profile") / "lane.yaml"
    path.write_text(yaml.safe_dump({
        "extends": str(CONFIG_DIR / "smoke_vllm.yaml"), "profile": "smoke_vllm_lane",
        "model": {"source": "local", "name": "apsft-tiny-qwen3", "path": lane.base, "revision": None,
                  "architecture": None},
        "embedded": None,
        "tasks": {"train": {"per_cell": 1, "total": 9}},
    }))
    return path


def apsft_run(profile: Path, store: Path, state: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "APSFT_STATE_DIR": str(state)}
    for name in ("APSFT_CONFIG", "APSFT_PROFILE", "APSFT_STORE_DIR", "DAGSTER_HOME", "APSFT_MODEL_DIR"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "run", "--config", str(profile),
                           "--store", str(store), *args], capture_output=True, text=True, env=env, cwd=PROJECT_ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module")
def stores(profile, tmp_path_factory):
    """Two processes: one harvests straight through; the other starts on a store holding the first
    FIRST_PART shards, as a run killed after them leaves it (each shard, its key, their receipts), and resumes."""
    config = load_config(path=profile)
    tasks = train_task_ids(config)
    straight, resumed, state = (tmp_path_factory.mktemp(n) for n in ("straight", "resumed", "state"))
    apsft_run(profile, straight, state / "a", "--to", "bank_and_parity_job")
    left = {}
    for task in tasks[:FIRST_PART]:  # each shard with its key (what made it), and their receipts
        for name in (n + suffix for n in (key_file(TRACE_BANK, task), shard_file(TRACE_BANK, task))
                     for suffix in ("", RECEIPT_SUFFIX)):
            (resumed / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(straight / name, resumed / name)
        left[task] = os.stat(resumed / shard_file(TRACE_BANK, task)).st_mtime_ns
    apsft_run(profile, resumed, state / "b", "--to", "bank_and_parity_job")
    return config, tasks, Store(straight), Store(resumed), left


def test_a_resumed_harvest_keeps_its_shards_and_ends_byte_identical(stores):
    config, tasks, straight, resumed, first = stores
    assert {t: os.stat(resumed.path(shard_file(TRACE_BANK, t))).st_mtime_ns for t in first} == first  # kept, not redone
    names = [shard_file(TRACE_BANK, t) for t in tasks] + [summary_file(TRACE_BANK)]
    for name in names:
        assert straight.path(name).read_bytes() == resumed.path(name).read_bytes(), name
    banks = {name: dir_digests(s.path(TRACE_BANK)) for name, s in (("straight", straight), ("resumed", resumed))}
    assert banks["straight"] == banks["resumed"] and len(banks["straight"]) >= len(tasks)
    bank = straight.get_parquet(shard_file(TRACE_BANK, tasks[0]))
    assert bank.height >= config.harvest.samples_per_task and bank["eligible"].any()


def test_the_parity_gate_runs_vllm_against_the_reference(lane, stores):
    config, _, straight, resumed, _ = stores
    receipt = straight.get_json(PARITY_GATE)
    assert straight.path(PARITY_GATE).read_bytes() == resumed.path(PARITY_GATE).read_bytes()
    assert set(receipt["metrics"]) == set(receipt["means"]) == set(METRICS)
    assert receipt["traces"] == len(receipt["calibration_trace_ids"]) == config.scoring.calibration_traces
    for metric in METRICS:
        assert 0.0 <= receipt["means"][metric] <= receipt["metrics"][metric]
    assert receipt["threshold"] == config.scoring.parity_threshold
    assert receipt["passed"] == all(v <= receipt["threshold"] for v in receipt["metrics"].values())
    assert receipt["passed"], receipt  # float32 on one CPU: the two instruments agree far inside 0.15
    lane.receipt("parity_gate.json", receipt)
