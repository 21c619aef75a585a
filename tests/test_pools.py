"""GPU pools: every asset that holds a model engine is in the `gpu` pool, and with the instance's
pool limit at 1 two GPU assets never overlap while a CPU asset runs beside them (read from the
run's step events, multiprocess executor)."""

import os
from pathlib import Path

import dagster as dg
from dagster._core.events import DagsterEventType

ENGINE_ASSETS = {"trace_bank", "parity_gate", "score_bank", "r1_labels", "adapters", "merged_models",
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


def test_two_gpu_assets_never_overlap_while_a_cpu_asset_runs_beside(tmp_path, monkeypatch):
    spans = _run(tmp_path, monkeypatch, "concurrency:\n  pools:\n    default_limit: 1\n")
    assert not _overlap(spans["gpu_first"], spans["gpu_second"]), spans
    assert _overlap(spans["cpu_beside"], spans["gpu_first"]) or _overlap(spans["cpu_beside"], spans["gpu_second"])


def test_without_the_pool_limit_the_gpu_assets_do_overlap(tmp_path, monkeypatch):
    """The control: the limit, not the executor, is what keeps the two GPU assets apart."""
    spans = _run(tmp_path, monkeypatch, "")
    assert _overlap(spans["gpu_first"], spans["gpu_second"]), spans
