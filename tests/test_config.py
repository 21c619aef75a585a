import os
import subprocess
import sys

import pytest

from apsft_dagster.core.config import load_config, model_dir
from apsft_dagster.core.errors import ConfigError
from conftest import variant_config


def test_full_profile_carries_the_seed_numbers(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setenv("APSFT_MODEL_DIR", str(tmp_path))
    c = load_config("full")
    assert [c.tasks.train.total, c.tasks.core_iid.total, c.tasks.core_hard.total, c.tasks.held_family.total] == [360, 180, 60, 60]
    assert c.tasks.train.per_cell == 40 and c.harvest.samples_per_task == 64
    assert (c.harvest.sampling.temperature, c.harvest.sampling.top_p, c.harvest.sampling.top_k) == (1.0, 0.95, 20)
    assert (c.harvest.allowance, c.harvest.continuation, c.harvest.record_limit) == (12288, 2048, 16000)
    assert (c.harvest.topup_batches, c.harvest.topup_size) == (4, 16)
    assert (c.selection.top_k, c.selection.band, c.scoring.parity_threshold) == (12, 0.25, 0.15)
    assert (c.training.lora.rank, c.training.lora.alpha, c.training.lora.dropout) == (32, 64, 0.05)
    assert (c.training.epochs, c.training.learning_rate, c.training.grad_accum, c.training.max_length) == (2, 2e-4, 16, 16000)
    assert (c.training.loss_weights.prompt, c.training.loss_weights.thought, c.training.loss_weights.answer) == (0.0, 0.5, 1.0)
    assert (c.seeds.experiment, c.seeds.replication, c.evaluation.bootstrap_resamples) == (42, 43, 10000)
    assert (c.stage_b.min_gain, c.stage_b.max_parse_rate_loss, c.stage_b.k_samples) == (0.03, 0.02, 8)
    assert c.model.path == "models/Qwen3.5-4B" and model_dir(c) == tmp_path  # as written; found via the env


def test_digest_is_canonical_and_sensitive(tmp_path):
    smoke = load_config("smoke")
    assert smoke.digest == load_config(path=variant_config(tmp_path, lambda r: None)).digest
    other = load_config(path=variant_config(tmp_path, lambda r: r["selection"].update(band=0.3)))
    assert other.digest != smoke.digest


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["harvest"].update(samples_per_task="8"), r"harvest\.samples_per_task: Input should be a valid integer"),
    (lambda r: r["harvest"].update(temprature=1.0), r"harvest\.temprature: unknown key"),
    (lambda r: r["tasks"]["train"].update(total=19), r"tasks\.train\.total is 19 but 3 families x 3 levels x per_cell 2 = 18"),
    (lambda r: r["tasks"]["held_family"].update(families=["caravan", "spindle"], total=24),
     r"held_family\.families must not share a family"),
    (lambda r: r["tasks"]["train"].update(families=["caravan", "dune"], total=12), r"unknown \['dune'\]"),
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
    with pytest.raises(ConfigError, match=r"profile 'nope'.*known profiles are \['full', 'smoke'\]"):
        load_config("nope")


def test_cli_rejects_a_bad_config_before_writing_anything(tmp_path):
    bad = variant_config(tmp_path, lambda r: r["selection"].update(top_k=1.5))
    store, home = tmp_path / "store", tmp_path / "home"
    env = {**os.environ, "APSFT_STATE_DIR": str(home)}
    proc = subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "run", "--config", str(bad), "--store", str(store)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert "selection.top_k: Input should be a valid integer" in proc.stderr
    assert not store.exists() and not home.exists()
