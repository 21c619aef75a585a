"""The second core's helper (assets/second_core.py): when a step wants one, which partitions it
takes, and what the step does when the helper fails. That a helper's bytes equal the step's own is
proved on README command 1's run (test_materialize's docstring names the tests)."""

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


class _Recorded(second_core.Helper):
    def __init__(self, name, factory, experiment, keys, options=None):  # records; starts no process
        self.name, self.keys = name, keys


def test_a_helper_starts_once_the_half_left_is_worth_it(monkeypatch):
    """`Share.computed`: the later half of what is left goes to a helper once that half is worth
    WORTH_S seconds at the fastest partition so far; never for a resource the helper cannot build."""
    monkeypatch.setattr(second_core, "cores", lambda: 2)
    monkeypatch.delenv(second_core.SWITCH, raising=False)
    monkeypatch.setattr(second_core, "Helper", _Recorded)
    experiment = ExperimentResource(profile="smoke")
    generator = GenerationResource(experiment=experiment)
    worth = second_core.WORTH_S
    share = second_core.Share("trace_bank", harvest_worker, experiment, generator)
    share.computed(worth / 2, list("bcdef"))  # the first (with the model's load): 2 left for it, 1.0 x WORTH_S
    assert share.helper.keys == ["e", "f"] and share.owns("e") and not share.owns("d")
    share.computed(0.0, list("cdef"))  # once started, nothing changes
    assert share.helper.keys == ["e", "f"]
    slow_first = second_core.Share("score_bank", harvest_worker, experiment, generator)
    slow_first.computed(worth, ["b"])  # nothing would be left for a helper (1 key: the step keeps it)
    slow_first.computed(worth / 10, list("cdefg"))  # 3 for it at the fastest, 0.1 x WORTH_S: not worth it
    assert slow_first.helper is None and slow_first.fastest == worth / 10
    assert slow_first.result("g") is None  # the step computes it

    class Scripted(GenerationResource):  # a test's engine: the helper could not build it
        pass
    never = second_core.Share("trace_bank", harvest_worker, experiment, Scripted(experiment=experiment))
    never.computed(worth * 10, list("bcdef"))
    assert never.helper is None


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


def test_a_helper_dropped_unread_stops_and_leaves_no_folder(tmp_path):
    """A step that fails before it reads its helper's results: the helper is stopped, its folder goes."""
    import gc

    experiment = ExperimentResource(profile="smoke", store_dir=str(tmp_path / "store"))
    helper = second_core.Helper("trace_bank", harvest_worker, experiment, ["caravan-L1-000"])
    proc, folder = helper._proc, helper._dir
    assert folder.is_dir() and folder.name.startswith(f"{second_core.PREFIX}{os.getpid()}-")
    del helper
    gc.collect()
    assert proc.poll() is not None and not folder.exists()


def test_a_killed_steps_helper_folder_is_swept_by_the_next_helper(tmp_path):
    """A step killed with SIGKILL runs no finalizer: the next helper on the machine removes the folder
    of a step whose process is gone, and leaves a living one's."""
    import subprocess
    import tempfile
    from pathlib import Path

    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = Path(tempfile.mkdtemp(prefix=f"{second_core.PREFIX}{gone.pid}-"))
    (dead / "results.jsonl").write_text("")
    living = Path(tempfile.mkdtemp(prefix=f"{second_core.PREFIX}{os.getppid()}-"))
    try:
        experiment = ExperimentResource(profile="smoke", store_dir=str(tmp_path / "store"))
        helper = second_core.Helper("trace_bank", harvest_worker, experiment, ["caravan-L1-000"])
        assert not dead.exists() and living.is_dir() and helper._dir.is_dir()
        helper.result("caravan-L1-000")
    finally:
        for folder in (dead, living):
            if folder.exists():
                second_core.shutil.rmtree(folder)


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
