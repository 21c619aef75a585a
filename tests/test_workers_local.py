"""The second core's helper (workers/local.py): when a step wants one, which partitions it
takes, and what the step does when the helper fails. That a helper's bytes equal the step's own is
proved on README command 1's run (test_materialize's docstring names the tests)."""

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from apsft_dagster.core.config import load_config
from apsft_dagster.experiment.assets.trace_bank import harvest_worker
from apsft_dagster.resources import ExperimentResource, GenerationResource
from apsft_dagster.workers import local, pinning


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
    monkeypatch.setattr(local, "cores", lambda: cores)
    if env is None:
        monkeypatch.delenv(local.SWITCH, raising=False)
    else:
        monkeypatch.setenv(local.SWITCH, env)
    assert local.wanted(_config(profile, **compute)) is expected


class _Recorded(local.Helper):
    def __init__(self, name, factory, experiment, options=None):  # records; starts no process
        self.name, self.keys = name, []

    def give(self, keys):
        self.keys = list(keys)


@pytest.fixture
def recorded(monkeypatch):
    """Two cores, the helper switched on and recorded (`_Recorded`: no process); (experiment, generator)."""
    monkeypatch.setattr(local, "cores", lambda: 2)
    monkeypatch.delenv(local.SWITCH, raising=False)
    monkeypatch.setattr(local, "Helper", _Recorded)
    experiment = ExperimentResource(profile="smoke")
    generator = GenerationResource(experiment=experiment)
    return experiment, generator


def test_a_step_that_expects_work_starts_a_warm_helper_and_gives_it_the_keys_once_open(recorded):
    """`Share.expect(todo)`: two or more partitions to compute start a helper at once, with no keys
    (it loads); `open()` gives it the partitions in the step's order; before that every partition is
    the step's. One partition, or none, or a resource the helper could not build: no helper."""
    experiment, generator = recorded
    share = local.Share("trace_bank", harvest_worker, experiment, generator).expect(list("abcdef"))
    assert share.helper.keys == [] and share.result("f") is None  # not open: the step's
    share.open()
    assert share.helper.keys == list("abcdef")
    share.open()  # given once
    assert share.helper.keys == list("abcdef")
    for todo in ([], ["a"]):
        assert local.Share("score_bank", harvest_worker, experiment, generator).expect(todo).helper is None

    class Scripted(GenerationResource):  # a test's engine: the helper could not build it
        pass
    never = local.Share("trace_bank", harvest_worker, experiment, Scripted(experiment=experiment))
    assert never.expect(list("abcdef")).open().helper is None and never.result("f") is None


def test_a_bank_starts_its_helper_after_its_first_shard_only_when_the_rest_is_worth_it(recorded):
    """`expect_after(seconds, rest)`: the rest at the first shard's pace must be worth `WORTH_S` (a
    helper's load twice over): 12 tasks at 1 s are, 11 are not; 17 at 0.2 s (smoke's scoring) not."""
    experiment, generator = recorded
    assert local.WORTH_S == 12.0
    share = lambda: local.Share("score_bank", harvest_worker, experiment, generator)  # noqa: E731
    assert share().expect_after(1.0, [f"t{i}" for i in range(12)]).open().helper.keys == [f"t{i}" for i in range(12)]
    assert share().expect_after(1.0, [f"t{i}" for i in range(11)]).open().helper is None
    assert share().expect_after(0.2, [f"t{i}" for i in range(17)]).open().helper is None


def test_exactly_one_side_wins_each_claim(tmp_path):
    assert local.claim(tmp_path, 3) and not local.claim(tmp_path, 3)
    assert local.claim(tmp_path, 4) and sorted(p.name for p in tmp_path.iterdir()) == ["3", "4"]


def sleeper(experiment, seconds: float, fail: str = "") -> Callable[[str], dict]:
    """A helper's work for the tests below: `seconds` a key, who computed it; raises on `fail`."""
    def work(key: str) -> dict:
        if key == fail:
            raise RuntimeError(f"planted failure on {key}")
        time.sleep(seconds)
        return {"pid": os.getpid()}
    return work


def _shared(tmp_path, monkeypatch, keys, watch=None, **options) -> tuple[local.Share, dict[str, int]]:
    """A real helper running `sleeper` beside a step that sleeps as long a key; who computed each key.
    `watch(share)` is called as the step reaches each key."""
    monkeypatch.setattr(local, "cores", lambda: 2)
    monkeypatch.delenv(local.SWITCH, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    experiment = ExperimentResource(profile="smoke", store_dir=str(tmp_path / "store"))
    share = local.Share("trace_bank", sleeper, experiment, GenerationResource(experiment=experiment),
                              options).expect(keys)
    deadline = time.monotonic() + 120
    while not share.helper.ready():
        assert share.helper._proc.poll() is None and time.monotonic() < deadline, "the helper never got ready"
        time.sleep(0.05)
    share.open()
    work, by = sleeper(experiment, options["seconds"]), {}
    for key in keys:
        if watch is not None:
            watch(share)
        by[key] = (share.result(key) or work(key))["pid"]
        assert 0 <= share.pace()[0] <= len(keys) - len(by), key  # at most what the step has not reached
    assert share.pace() == (0, 1)  # every key claimed, the helper gone: nothing left, one hand
    return share, by


def test_the_step_and_its_helper_meet_where_their_work_balances(tmp_path, monkeypatch):
    """The step claims from the front, the helper from the back: each key computed once, the step's a
    prefix, the helper's the rest, their counts within one partition or two of each other."""
    keys = [f"k{i}" for i in range(10)]
    share, by = _shared(tmp_path, monkeypatch, keys, seconds=0.4)
    helper_pid = share.helper._proc.pid
    step = [k for k in keys if by[k] == os.getpid()]
    helped = [k for k in keys if by[k] == helper_pid]
    assert step + helped == keys and step == keys[:len(step)], by
    assert abs(len(step) - len(helped)) <= 2, by
    assert share.helper.exit_code == 0 and share.helper.missed() == []


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning apart needs two cores")
def test_the_step_and_its_helper_run_pinned_to_two_cores_until_it_is_read(tmp_path, monkeypatch):
    """While the helper lives, the step is pinned to one core and the helper to another (beside a busy
    process the kernel may otherwise leave both on one core); once read, the step has its cores back.
    With `APSFT_PIN=off` nothing is pinned."""
    allowed, seen = os.sched_getaffinity(0), []

    def watch(share):
        if share.helper._proc.poll() is None:
            seen.append((os.sched_getaffinity(0), os.sched_getaffinity(share.helper._proc.pid)))

    _shared(tmp_path, monkeypatch, [f"k{i}" for i in range(6)], watch, seconds=0.3)
    assert seen and all(len(mine) == 1 and len(its) == 1 and mine != its for mine, its in seen), seen
    assert os.sched_getaffinity(0) == allowed  # given back once the helper was read

    monkeypatch.setenv(pinning.PIN, "off")
    seen.clear()
    _shared(tmp_path, monkeypatch, [f"k{i}" for i in range(4)], watch, seconds=0.3)
    assert seen and all(mine == allowed and its == allowed for mine, its in seen), seen


def test_a_key_the_helper_claimed_and_failed_is_computed_by_the_step(tmp_path, monkeypatch):
    """The helper computes the last key, claims the one before and fails on it (and exits): the step
    computes that one itself, and everything before it; the last stays the helper's."""
    keys = [f"k{i}" for i in range(10)]
    share, by = _shared(tmp_path, monkeypatch, keys, seconds=0.4, fail="k8")
    assert [k for k in keys if by[k] != os.getpid()] == ["k9"], by
    assert share.helper.exit_code not in (0, None) and share.helper.missed() == ["k8"]


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
    helper = local.Helper("trace_bank", harvest_worker, experiment)
    deadline = time.monotonic() + 120
    while not helper.ready():
        assert helper._proc.poll() is None and time.monotonic() < deadline, "the warm helper never got ready"
        time.sleep(0.1)
    assert helper._proc.poll() is None  # loaded, waiting for its keys
    helper.give(["caravan-L1-000"])
    assert helper.result("caravan-L1-000") is None and helper.exit_code not in (0, None)  # claimed, failed
    assert helper.missed() == ["caravan-L1-000"]


def test_a_warm_helper_never_given_work_stops_with_its_step(tmp_path):
    import gc

    experiment = ExperimentResource(profile="smoke", store_dir=str(tmp_path / "store"))
    helper = local.Helper("trace_bank", harvest_worker, experiment)
    proc, folder = helper._proc, helper._dir
    del helper
    gc.collect()
    assert proc.poll() is not None and not folder.exists()


def test_a_helper_that_dies_loading_leaves_every_key_to_the_step(tmp_path):
    """A real helper over a store with no task catalog: its worker fails to build, so it claims
    nothing; the step wins every claim and computes every key itself; the temp folder goes."""
    experiment = ExperimentResource(profile="smoke", store_dir=str(tmp_path / "store"))
    helper = local.Helper("trace_bank", harvest_worker, experiment)
    folder = helper._dir
    assert helper._proc.wait(timeout=120) not in (0, None) and not helper.ready()
    helper.give(["caravan-L1-000", "caravan-L1-001"])
    assert helper.take("caravan-L1-001") and helper.take("caravan-L1-000") and not helper.take("caravan-L1-000")
    assert helper.result("caravan-L1-000") is None and helper.missed() == []
    assert not folder.exists()


def test_a_helper_dropped_unread_stops_and_leaves_no_folder(tmp_path):
    """A step that fails before it reads its helper's results: the helper is stopped, its folder goes."""
    import gc

    experiment = ExperimentResource(profile="smoke", store_dir=str(tmp_path / "store"))
    helper = local.Helper("trace_bank", harvest_worker, experiment)
    helper.give(["caravan-L1-000"])
    proc, folder = helper._proc, helper._dir
    assert folder.is_dir() and folder.name.startswith(f"{local.PREFIX}{os.getpid()}-")
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
    dead = Path(tempfile.mkdtemp(prefix=f"{local.PREFIX}{gone.pid}-"))
    (dead / "results.jsonl").write_text("")
    living = Path(tempfile.mkdtemp(prefix=f"{local.PREFIX}{os.getppid()}-"))
    try:
        experiment = ExperimentResource(profile="smoke", store_dir=str(tmp_path / "store"))
        helper = local.Helper("trace_bank", harvest_worker, experiment)
        helper.give(["caravan-L1-000"])
        assert not dead.exists() and living.is_dir() and helper._dir.is_dir()
        helper.result("caravan-L1-000")
    finally:
        for folder in (dead, living):
            if folder.exists():
                local.shutil.rmtree(folder)


def test_a_line_cut_short_by_a_kill_is_not_a_result(tmp_path):
    results = tmp_path / "results.jsonl"
    results.write_text('{"key": "a", "result": {"action": "generated"}}\n{"key": "b", "res')
    assert local._read(results) == {"a": {"action": "generated"}}
    assert local._read(tmp_path / "missing.jsonl") == {}


def test_the_helper_dies_with_its_step(tmp_path):
    """PR_SET_PDEATHSIG: a step killed with SIGKILL takes its helper with it (no orphan writing on)."""
    import signal
    import subprocess
    import sys
    import time

    parent = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'from apsft_dagster.workers.local import "
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
