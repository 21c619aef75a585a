"""GPU pools: every asset that holds a model engine is in the `gpu` pool, and with the instance's
pool limit at 1 two GPU assets never overlap while a CPU asset runs beside them (read from the
run's step events, multiprocess executor)."""

import os
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import DagsterEventType

ENGINE_ASSETS = {"trace_bank", "parity_gate", "score_bank", "r1_labels", "adapters", "merged_models",
                 "replication_adapters", "replication_merged_models",
                 "stage_a_generations", "stage_b_generations"}


def test_every_engine_asset_is_in_the_gpu_pool_and_nothing_else_is():
    from apsft_dagster.definitions import defs

    graph = defs.resolve_asset_graph()
    pooled = {k.to_user_string(): graph.get(k).pools for k in graph.get_all_asset_keys() if graph.get(k).pools}
    assert set(pooled) == ENGINE_ASSETS and all(p == {"gpu"} for p in pooled.values())


def _spans(instance, run_id) -> dict[str, tuple[float, float]]:
    spans: dict[str, dict] = {}
    for kind in ("STEP_START", "STEP_SUCCESS"):
        for entry in instance.all_logs(run_id, of_type=getattr(DagsterEventType, kind)):
            spans.setdefault(entry.dagster_event.step_key, {})[kind] = entry.timestamp
    return {step: (s["STEP_START"], s["STEP_SUCCESS"]) for step, s in spans.items()}


def _run(tmp_path, monkeypatch, settings: str):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n" + settings)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    tests = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]))
    from pool_defs import pool_job

    with dg.DagsterInstance.get() as instance:
        result = dg.execute_job(dg.reconstructable(pool_job), instance=instance)
        assert result.success
        return _spans(instance, result.run_id)


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@pytest.mark.slow
def test_two_gpu_assets_never_overlap_while_a_cpu_asset_runs_beside(tmp_path, monkeypatch):
    spans = _run(tmp_path, monkeypatch, "concurrency:\n  pools:\n    default_limit: 1\n")
    assert not _overlap(spans["gpu_first"], spans["gpu_second"]), spans
    assert _overlap(spans["cpu_beside"], spans["gpu_first"]) or _overlap(spans["cpu_beside"], spans["gpu_second"])


@pytest.mark.slow
def test_without_the_pool_limit_the_gpu_assets_do_overlap(tmp_path, monkeypatch):
    """The control: the limit, not the executor, is what keeps the two GPU assets apart."""
    spans = _run(tmp_path, monkeypatch, "")
    assert _overlap(spans["gpu_first"], spans["gpu_second"]), spans


def _stale_run(instance, process: str) -> str:
    """A pool_job run recorded as STARTED by `process`, holding the gpu pool's one slot."""
    from apsft_dagster.run_tags import RUNNER_TAG
    from pool_defs import pool_job

    run = instance.create_run_for_job(pool_job(), status=dg.DagsterRunStatus.STARTED,
                                      tags={RUNNER_TAG: process})
    storage = instance.event_log_storage
    storage.initialize_concurrency_limit_to_default("gpu")
    assert storage.claim_concurrency_slot("gpu", run.run_id, "gpu_first").is_claimed
    return run.run_id


def test_a_killed_runner_leaves_no_claimed_gpu_slot_behind(tmp_path, monkeypatch):
    """The local instance `apsft run` creates limits the gpu pool to 1; a run whose process was
    killed while it held the slot is failed and its slot freed by the next `apsft run` (until then
    no other run's GPU step gets the slot); a run whose process is alive is left alone."""
    import subprocess

    from apsft_dagster.core.paths import ensure_dagster_home
    from apsft_dagster.run_recovery import release_abandoned, this_process

    monkeypatch.setenv("APSFT_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    ensure_dagster_home(tmp_path / "store")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen(["sleep", "30"])
    killed = this_process(child.pid)
    child.kill()
    child.wait()
    with dg.DagsterInstance.get() as instance:
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
        assert not instance.nux_enabled and not instance.telemetry_enabled  # no first-visit prompt in the UI
        stale = _stale_run(instance, killed)
        assert not instance.event_log_storage.claim_concurrency_slot("gpu", "other-run", "gpu_first").is_claimed
        instance.event_log_storage.free_concurrency_slots_for_run("other-run")

        assert release_abandoned(instance) == [stale]
        assert instance.get_run_by_id(stale).status == dg.DagsterRunStatus.FAILURE
        assert instance.event_log_storage.get_concurrency_info("gpu").active_slot_count == 0

        live = _stale_run(instance, this_process())  # this process is alive: its run is not abandoned
        assert release_abandoned(instance) == []
        assert instance.get_run_by_id(live).status == dg.DagsterRunStatus.STARTED
        instance.event_log_storage.free_concurrency_slots_for_run(live)
