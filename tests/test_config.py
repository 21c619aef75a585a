import os
import subprocess
import sys

import pytest

from apsft_dagster.cli import main
from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import ConfigError
from apsft_dagster.core.paths import local_model_dir
from conftest import variant_config


def test_full_profile_carries_the_seed_numbers(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setenv("APSFT_MODEL_DIR", str(tmp_path))
    c = load_config("full")
    assert [c.tasks.train.total, c.tasks.core_iid.total, c.tasks.core_hard.total,
            c.tasks.held_family.total] == [360, 180, 60, 60]
    assert c.tasks.train.per_cell == 40 and c.harvest.samples_per_task == 64
    assert (c.harvest.sampling.temperature, c.harvest.sampling.top_p, c.harvest.sampling.top_k) == (1.0, 0.95, 20)
    assert (c.harvest.allowance, c.harvest.continuation, c.harvest.record_limit) == (12288, 2048, 16000)
    assert (c.harvest.topup_batches, c.harvest.topup_size) == (4, 16)
    assert (c.selection.top_k, c.selection.band, c.scoring.parity_threshold) == (12, 0.25, 0.15)
    assert (c.training.lora.rank, c.training.lora.alpha, c.training.lora.dropout) == (32, 64, 0.05)
    assert (c.training.epochs, c.training.learning_rate, c.training.grad_accum,
            c.training.max_length) == (2, 2e-4, 16, 16000)
    assert (c.training.loss_weights.prompt, c.training.loss_weights.thought,
            c.training.loss_weights.answer) == (0.0, 0.5, 1.0)
    assert (c.seeds.experiment, c.seeds.replication, c.evaluation.bootstrap_resamples) == (42, 43, 10000)
    assert (c.stage_b.min_gain, c.stage_b.max_parse_rate_loss, c.stage_b.k_samples) == (0.03, 0.02, 8)
    assert c.model.path == "models/Qwen3.5-4B"  # as written
    assert local_model_dir(c.model.path) == tmp_path  # found via the env


def test_digest_is_canonical_and_sensitive(tmp_path):
    smoke = load_config("smoke")
    assert smoke.digest == load_config(path=variant_config(tmp_path, lambda r: None)).digest
    other = load_config(path=variant_config(tmp_path, lambda r: r["selection"].update(band=0.3)))
    assert other.digest != smoke.digest


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["harvest"].update(samples_per_task="8"),
     r"harvest\.samples_per_task: Input should be a valid integer"),
    (lambda r: r["harvest"].update(temprature=1.0), r"harvest\.temprature: unknown key"),
    (lambda r: r["tasks"]["train"].update(total=19),
     r"tasks\.train\.total is 19 but 3 families x 3 levels x per_cell 2 = 18"),
    (lambda r: r["tasks"]["held_family"].update(families=["caravan", "spindle"], total=24),
     r"held_family\.families must not share a family"),
    (lambda r: r["tasks"]["train"].update(families=["caravan", "dune"], total=12),
     r"tasks\.train\.families\.1: Input should be 'caravan', .* \(got 'dune'\)"),
    (lambda r: r["tasks"]["train"].update(levels=[1, 1, 2]), r"tasks\.train\.levels: \[1, 1, 2\] names one twice"),
    (lambda r: r.pop("scoring"), r"scoring: Field required"),
])
def test_bad_config_names_the_field(tmp_path, edit, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path=variant_config(tmp_path, edit))
    assert "variant.yaml" in str(info.value)


def test_full_without_model_directory_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("APSFT_MODEL_DIR", str(tmp_path / "absent"))
    with pytest.raises(ConfigError, match=r"model\.path: .*absent is not a model directory.*APSFT_MODEL_DIR"):
        load_config("full")


def test_unknown_profile_lists_the_known_ones():
    known = r"known profiles are \['full', 'full_cpu', 'laptop', 'laptop_rehearsal', 'smoke', 'smoke_vllm'\]"
    with pytest.raises(ConfigError, match=rf"profile 'nope'.*{known}"):
        load_config("nope")


def test_cli_rejects_a_bad_config_before_writing_anything(tmp_path):
    bad = variant_config(tmp_path, lambda r: r["selection"].update(top_k=1.5))
    store, home = tmp_path / "store", tmp_path / "home"
    env = {**os.environ, "APSFT_STATE_DIR": str(home)}
    proc = subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "run", "--config", str(bad),
                           "--store", str(store)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert "selection.top_k: Input should be a valid integer" in proc.stderr
    assert not store.exists() and not home.exists()


def test_a_profile_extends_another_key_by_key(tmp_path):
    """smoke_vllm is smoke with four sections changed: mappings merge, other values replace."""
    import yaml

    smoke, lane = load_config("smoke"), load_config("smoke_vllm")
    assert (lane.model.architecture, lane.harvest.backend, lane.embedded.vision) == ("qwen3", "vllm", None)
    assert lane.harvest.model_dump(exclude={"backend"}) == smoke.harvest.model_dump(exclude={"backend"})
    assert lane.training == smoke.training and lane.tasks == smoke.tasks
    child = tmp_path / "child.yaml"
    child.write_text(yaml.safe_dump({"extends": "smoke", "tasks": {"train": {"per_cell": 1, "total": 9}}}))
    tasks = load_config(path=child).tasks.train
    assert (tasks.per_cell, tasks.total, tasks.families) == (1, 9, smoke.tasks.train.families)
    loop = tmp_path / "loop.yaml"
    loop.write_text("extends: loop.yaml\nprofile: loop\n")
    with pytest.raises(ConfigError, match=r"loop\.yaml: extends: 'loop\.yaml' extends itself"):
        load_config(path=loop)
    missing = tmp_path / "missing.yaml"
    missing.write_text("extends: nowhere\n")
    with pytest.raises(ConfigError, match=r"missing\.yaml: extends: 'nowhere': no file .*nowhere\.yaml"):
        load_config(path=missing)


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["vllm"].update(kv_cache_bytes=None),
     r"vllm\.kv_cache_bytes: required when harvest\.backend is vllm on compute\.device cpu"),
    (lambda r: r["embedded"].update(head_dim=16),
     r"embedded\.head_dim: 16 is not one vLLM's CPU attention backend supports \[32, 64"),
])
def test_the_vllm_section_is_checked_where_vllm_runs(tmp_path, edit, message):
    def on_vllm(raw):
        raw["harvest"]["backend"] = "vllm"
        raw["model"]["architecture"] = "qwen3"
        edit(raw)

    with pytest.raises(ConfigError, match=message):
        load_config(path=variant_config(tmp_path, on_vllm))
    load_config(path=variant_config(tmp_path, edit))  # the Transformers backend does not read the section


def test_the_sibling_sections_are_optional_and_outside_the_digest(tmp_path, capsys):
    """A profile without loss_mask and run_report is a valid experiment profile with the same
    digest; the sibling systems then say which section they need, and the experiment's generation
    audit falls back to the hack thresholds' defaults."""
    from apsft_dagster.cli import main
    from apsft_dagster.core.run_report.settings import HackThresholds, hack_thresholds
    from conftest import variant_config

    path = variant_config(tmp_path, lambda raw: (raw.pop("loss_mask"), raw.pop("run_report")))
    bare, smoke = load_config(path=path), load_config("smoke")
    assert bare.loss_mask is None and bare.run_report is None and bare.digest == smoke.digest
    assert hack_thresholds(bare) == HackThresholds() and hack_thresholds(smoke) == smoke.run_report.thresholds
    assert main(["loss-mask", "demo", "--config", str(path), "--store", str(tmp_path / "store")]) == 2
    assert "no loss_mask section, which the loss-mask curation needs" in capsys.readouterr().err
    assert main(["rl-report", "add", "r1", str(tmp_path), "--config", str(path), "--store", str(tmp_path / "s")]) == 2
    assert "no run_report section, which the RL run report needs" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()



@pytest.mark.parametrize("section, field, value, message", [
    ("harvest", "samples_per_task", -3, "greater than or equal to 1"),
    ("harvest", "samples_per_task", 0, "greater than or equal to 1"),
    ("selection", "band", -1.0, "greater than or equal to 0"),
    ("evaluation", "confidence", 1.5, "less than 1"),
    ("evaluation", "bootstrap_resamples", -5, "greater than or equal to 1"),
    ("scoring", "parity_threshold", -1.0, "greater than 0"),
    ("harvest.sampling", "temperature", -2.0, "greater than or equal to 0"),
    ("harvest.sampling", "top_p", 1.7, "less than or equal to 1"),
    ("harvest.sampling", "top_k", -4, "greater than or equal to 0"),
    ("stage_b", "min_gain", -1.5, "greater than or equal to -1"),
    ("harvest", "topup_batches", -1, "greater than or equal to 0"),
    ("training", "learning_rate", -0.001, "greater than 0"),
    ("training", "epochs", 0, "greater than or equal to 1"),
    ("vllm", "gpu_memory_utilization", 1.5, "less than or equal to 1"),
    ("vllm", "max_model_len", 0, "greater than or equal to 1"),
    ("loss_mask", "workers", 0, "greater than or equal to 1"),
])
def test_an_out_of_range_value_is_refused_naming_field_value_and_range(tmp_path, monkeypatch, capsys, section, field,
                                                                       value, message):
    """The twelve values a new user tried (issue 24) and a few more, on the Transformers backend
    too: each is refused on load, and `apsft validate` writes nothing."""
    def edit(raw):
        node = raw
        for key in section.split("."):
            node = node[key]
        node[field] = value

    path = variant_config(tmp_path, edit)
    with pytest.raises(ConfigError) as info:
        load_config(path=path)
    assert f"{section}.{field}: Input should be {message}" in str(info.value)
    assert f"(got {value!r})" in str(info.value)
    state = tmp_path / "state"
    monkeypatch.setenv("APSFT_STATE_DIR", str(state))
    assert main(["validate", "--config", str(path)]) == 2  # in this process: the property test's 755 draws, too
    assert f"{section}.{field}" in capsys.readouterr().err and not state.exists()
