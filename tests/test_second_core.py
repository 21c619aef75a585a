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
        self.name, self.keys, self.warm, self.is_ready = name, list(keys or ()), keys is None, False

    def ready(self):
        return self.is_ready

    def give(self, keys):
        self.keys = list(keys)


@pytest.fixture
def recorded(monkeypatch):
    """Two cores, the helper switched on and recorded (`_Recorded`: no process); (experiment, generator)."""
    monkeypatch.setattr(second_core, "cores", lambda: 2)
    monkeypatch.delenv(second_core.SWITCH, raising=False)
    monkeypatch.setattr(second_core, "Helper", _Recorded)
    experiment = ExperimentResource(profile="smoke")
    generator = GenerationResource(experiment=experiment)
    return experiment, generator


def test_a_helper_starts_once_the_half_left_is_worth_it(recorded):
    """`Share.computed`: the later half of what is left goes to a helper once that half is worth
    WORTH_S seconds at the fastest partition so far; never for a resource the helper cannot build."""
    experiment, generator = recorded
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


def test_a_step_that_expects_work_starts_a_warm_helper_and_gives_it_half_once_ready(recorded):
    """`Share.expect(n)`: two or more partitions to compute start a helper at once, with no keys; it is
    given the later half of what is left after a partition only once it is ready and that half is worth
    WARM_WORTH_S; a step with one partition, or none, starts none."""
    experiment, generator = recorded
    warm = second_core.WARM_WORTH_S
    share = second_core.Share("trace_bank", harvest_worker, experiment, generator).expect(6)
    assert share.helper.warm and share.helper.keys == [] and not share.owns("f")
    share.computed(warm * 10, list("bcdef"))  # worth it, but the helper is still loading: the step goes on
    assert share.helper.keys == []
    share.helper.is_ready = True
    share.computed(warm / 3, list("cdef"))  # ready; 2 left for it x warm / 3 = 0.67 x WARM_WORTH_S: not yet
    assert share.helper.keys == [] and share.fastest == warm / 3
    share.computed(warm, list("def"))  # 1 for it at the fastest (warm / 3): still not worth it
    assert share.helper.keys == []
    more = second_core.Share("trace_bank", harvest_worker, experiment, generator).expect(9)
    more.helper.is_ready = True
    more.computed(warm / 2, list("bcdefgh"))  # the later 3 of 7 for it x warm / 2 = 1.5 x WARM_WORTH_S
    assert more.helper.keys == ["f", "g", "h"] and more.owns("h") and not more.owns("e")
    more.computed(0.0, list("cdefgh"))  # given once
    assert more.helper.keys == ["f", "g", "h"]
    for count in (0, 1):
        assert second_core.Share("score_bank", harvest_worker, experiment, generator).expect(count).helper is None


def test_a_warm_helper_loads_says_ready_and_computes_what_it_is_given(tmp_path):
    """A real warm helper over a store with a task catalog and no base model: it says it is ready (its
    worker built), then, given keys, fails on its first, so the step gets None for each and computes
    them itself."""
    import time

    from apsft_dagster.core.layout import TASK_CATALOG
    from apsft_dagster.core.store import Store
    from apsft_dagster.core.tasks.catalog import build_catalog

    Store(tmp_path / "store").put_parquet(TASK_CATALOG, build_catalog(load_config("smoke")))
    experiment = ExperimentResource(profile="smoke", store_dir=str(tmp_path / "store"))
    helper = second_core.Helper("trace_bank", harvest_worker, experiment, None)
    deadline = time.monotonic() + 120
    while not helper.ready():
        assert helper._proc.poll() is None and time.monotonic() < deadline, "the warm helper never got ready"
        time.sleep(0.1)
    assert helper._proc.poll() is None  # loaded, waiting for its keys
    helper.give(["caravan-L1-000"])
    assert helper.result("caravan-L1-000") is None and helper.exit_code not in (0, None)
    assert helper.missed() == ["caravan-L1-000"]


def test_a_warm_helper_never_given_work_stops_with_its_step(tmp_path):
    import gc

    experiment = ExperimentResource(profile="smoke", store_dir=str(tmp_path / "store"))
    helper = second_core.Helper("trace_bank", harvest_worker, experiment, None)
    proc, folder = helper._proc, helper._dir
    del helper
    gc.collect()
    assert proc.poll() is not None and not folder.exists()


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
