"""Devices per profile, the preflight, one config per run, and engine lifetimes (CPU, two tiny models)."""

import gc
import shutil
import weakref

import dagster as dg
import pytest

from apsft_dagster import cli
from apsft_dagster.core.config import load_config
from apsft_dagster.core.engines.lifetime import require_device
from apsft_dagster.core.errors import ConfigError, DeviceError
from apsft_dagster.core.paths import local_model_dir
from apsft_dagster.resources import ExperimentResource, GenerationResource
from conftest import variant_config


def _snapshot(path):
    """A directory that passes the config's model-path check (config.json present)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def test_profiles_choose_device_dtype_and_quantization(tmp_path, monkeypatch):
    smoke = load_config("smoke").compute
    assert (smoke.device, smoke.dtype, smoke.quantization) == ("cpu", "float32", "none")
    monkeypatch.setenv("APSFT_MODEL_DIR", str(_snapshot(tmp_path / "m")))
    full = load_config("full").compute
    assert (full.device, full.dtype, full.quantization) == ("cuda", "bfloat16", "nf4")
    bad = variant_config(tmp_path, lambda raw: raw["compute"].update(dtype="bfloat16"))
    with pytest.raises(ConfigError, match="compute.dtype: CPU runs in float32"):
        load_config(path=bad)


def test_digest_binds_the_configured_model_not_where_it_lies(tmp_path, monkeypatch):
    first = _snapshot(tmp_path / "a" / "Qwen3.5-4B")
    second = tmp_path / "b" / "elsewhere"
    shutil.copytree(first, second)
    monkeypatch.setenv("APSFT_MODEL_DIR", str(first))
    at_first = load_config("full")
    monkeypatch.setenv("APSFT_MODEL_DIR", str(second))
    at_second = load_config("full")
    assert at_first.digest == at_second.digest
    assert at_first.model.path == at_second.model.path == "models/Qwen3.5-4B"  # as written in the profile
    assert local_model_dir(at_second.model.path) == second  # found where this machine has it, at run time
    assert str(tmp_path) not in at_second.model_dump_json()


def test_missing_cuda_stops_with_the_stage_device_and_profile(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    full = load_config("smoke").compute.model_copy(update={"device": "cuda", "dtype": "bfloat16"})
    with pytest.raises(DeviceError, match="stage score_bank_job needs device cuda \\(profile full"):
        require_device(full, "score_bank_job", "full")
    require_device(load_config("smoke").compute, "score_bank_job", "smoke")  # CPU needs nothing


def test_apsft_run_full_without_cuda_writes_nothing(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in ("APSFT_PROFILE", "APSFT_CONFIG", "APSFT_STORE_DIR", "DAGSTER_HOME"):
        monkeypatch.setenv(name, "")  # recorded, so whatever the CLI exports is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setenv("APSFT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("APSFT_MODEL_DIR", str(_snapshot(tmp_path / "model")))
    store = tmp_path / "store"
    assert cli.main(["run", "--profile", "full", "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "stage trace_bank_job needs device cuda (profile full" in err and "nothing was written" in err
    assert not store.exists() and not (tmp_path / "state").exists()


def test_resource_refuses_a_config_other_than_the_definitions(tmp_path):
    other = variant_config(tmp_path, lambda raw: raw["harvest"].update(samples_per_task=9))
    smoke = load_config("smoke").digest
    resource = ExperimentResource(config_path=str(other), store_dir=str(tmp_path), definitions_digest=smoke)
    with pytest.raises(ConfigError, match=f"resolves to config {load_config(path=other).digest}.*built from {smoke}"):
        resource.config()

    @dg.asset
    def reads_config(experiment: ExperimentResource) -> None:
        raise AssertionError("never reached: the resource fails at setup")

    result = dg.materialize([reads_config], resources={"experiment": resource}, raise_on_error=False)
    assert not result.success


def test_resource_parses_the_config_once_per_run(tmp_path, monkeypatch):
    import apsft_dagster.resources.experiment as experiment_module

    calls = []
    real = experiment_module.load_config
    monkeypatch.setattr(experiment_module, "load_config", lambda *a: calls.append(a) or real(*a))
    experiment = ExperimentResource(profile="smoke", store_dir=str(tmp_path))

    @dg.asset
    def many_reads(experiment: ExperimentResource) -> None:
        for _ in range(5):
            experiment.config(), experiment.store()

    assert dg.materialize([many_reads], resources={"experiment": experiment}).success
    assert len(calls) == 1


def _tiny_model(path, seed: int):
    from tiny import tiny_model

    return tiny_model(path, seed)


def test_generation_resource_keeps_one_engine_and_releases_the_other(tmp_path):
    first, second = _tiny_model(tmp_path / "base", 1), _tiny_model(tmp_path / "merged", 2)
    experiment = ExperimentResource(profile="smoke", store_dir=str(tmp_path / "store"))
    seen = []

    @dg.asset
    def switches(generator: GenerationResource) -> None:
        engine = generator.engine(first)
        seen.append(weakref.ref(engine.model))
        assert generator.engine(first) is engine and generator.resident == first  # served, not reloaded
        del engine
        other = generator.engine(second)
        gc.collect()
        assert seen[0]() is None, "the first model is still alive after switching"
        assert generator.resident == second
        seen.append(weakref.ref(other.model))

    resources = {"experiment": experiment, "generator": GenerationResource(experiment=experiment)}
    assert dg.materialize([switches], resources=resources).success
    gc.collect()
    assert seen[1]() is None, "teardown must release the last engine"


def test_scoring_instruments_are_built_once_per_run(smoke_run):
    from apsft_dagster.resources import ScoringResource

    _, store = smoke_run
    experiment = ExperimentResource(profile="smoke", store_dir=str(store.root))
    built = []

    @dg.asset
    def scores_twice(scorer: ScoringResource) -> None:
        for name in ("reference", "fast", "reference", "fast"):
            built.append(scorer.instrument(name))

    assert dg.materialize([scores_twice], resources={"experiment": experiment,
                                                     "scorer": ScoringResource(experiment=experiment)}).success
    assert built[0] is built[2] and built[1] is built[3] and built[0] is not built[1]
    assert built[0].model is built[1].model  # one model behind both Transformers instruments
