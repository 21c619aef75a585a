"""The second core's helper (assets/second_core.py): when a step wants one, which partitions it
takes, and what the step does when the helper fails. That a helper's bytes equal the step's own is
test_materialize's `test_fresh_process_run_is_byte_identical` (command 1 with helpers against the
in-process smoke run without)."""

import os

import pytest

from apsft_dagster.assets import second_core
from apsft_dagster.core.config import load_config
from apsft_dagster.experiment.assets.trace_bank import harvest_worker
from apsft_dagster.resources import ExperimentResource, GenerationResource


def _config(profile="smoke", **compute):
    config = load_config(profile)
    return config.model_copy(update={"compute": config.compute.model_copy(update=compute)}) if compute else config


@pytest.mark.parametrize("profile, compute, cores, env, expected", [
    ("smoke", {}, 2, None, True),  # one pinned thread, two cores: a helper
    ("smoke", {}, 1, None, False),  # one core: nothing to spare
    ("smoke", {}, 2, "off", False),  # switched off
    ("laptop", {}, 2, None, True),  # one pinned thread too
    ("smoke", {"threads": 2}, 2, None, False),  # two pinned threads fill two cores (full_cpu's case)
    ("smoke", {"threads": 2}, 4, None, True),  # ... but not four
    ("smoke", {"device": "cuda"}, 2, None, False),  # a GPU: one engine per node
    ("smoke_vllm", {}, 2, None, False),  # vLLM's CPU engine: not tried two at once
])
def test_a_helper_only_where_a_core_is_spare(monkeypatch, profile, compute, cores, env, expected):
    monkeypatch.setattr(second_core, "cores", lambda: cores)
    if env is None:
        monkeypatch.delenv(second_core.SWITCH, raising=False)
    else:
        monkeypatch.setenv(second_core.SWITCH, env)
    assert second_core.wanted(_config(profile, **compute)) is expected


class _Recorded:
    def __init__(self, name, factory, experiment, keys, options=None):
        self.name, self.keys = name, keys


def test_the_helper_takes_the_later_half_and_needs_two_keys(monkeypatch):
    monkeypatch.setattr(second_core, "cores", lambda: 2)
    monkeypatch.delenv(second_core.SWITCH, raising=False)
    monkeypatch.setattr(second_core, "Helper", _Recorded)
    experiment = ExperimentResource(profile="smoke")
    generator = GenerationResource(experiment=experiment)

    def start(keys, resource=generator):
        return second_core.start("trace_bank", harvest_worker, experiment, keys, resource)
    assert start(["a"]) is None and start([]) is None
    assert start(list("abcde")).keys == ["d", "e"]  # 3 stay here
    assert start(list("abcd")).keys == ["c", "d"]

    class Scripted(GenerationResource):  # a test's engine: the helper could not build it
        pass
    assert start(list("abcd"), Scripted(experiment=experiment)) is None


def test_a_failed_helper_leaves_its_keys_to_the_step(tmp_path):
    """A real helper process over a store with no task catalog: it fails on its first key, so the
    step gets None for every key it gave away (and computes them itself); its temp folder goes."""
    experiment = ExperimentResource(profile="smoke", store_dir=str(tmp_path / "store"))
    helper = second_core.Helper("trace_bank", harvest_worker, experiment, ["caravan-L1-000", "caravan-L1-001"])
    folder = helper._dir
    assert helper.owns("caravan-L1-001") and not helper.owns("caravan-L1-002")
    assert helper.result("caravan-L1-000") is None and helper.exit_code not in (0, None)
    assert helper.missed() == ["caravan-L1-000", "caravan-L1-001"]
    assert not folder.exists()


def test_a_line_cut_short_by_a_kill_is_not_a_result(tmp_path):
    results = tmp_path / "results.jsonl"
    results.write_text('{"key": "a", "result": {"action": "generated"}}\n{"key": "b", "res')
    assert second_core._read(results) == {"a": {"action": "generated"}}
    assert second_core._read(tmp_path / "missing.jsonl") == {}


def test_the_helper_dies_with_its_step(tmp_path):
    """PR_SET_PDEATHSIG: a step killed with SIGKILL takes its helper with it (no orphan writing on)."""
    import signal
    import subprocess
    import sys
    import time

    parent = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'from apsft_dagster.assets.second_core import "
        "_die_with_parent; import os, sys, time; _die_with_parent(int(sys.argv[1])); print(os.getpid(), flush=True); "
        "time.sleep(60)', str(os.getpid())], stdout=subprocess.PIPE, text=True)\n"
        "print(child.stdout.readline().strip(), flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    helper = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    for _ in range(100):
        try:
            os.kill(helper, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(helper, signal.SIGKILL)
    pytest.fail("the helper outlived its killed step")
