"""The profile as a resource: the definitions built for a choice carry it in the experiment resource's
fields, and only profile.py's entry point (and the CLI) read the environment."""

import argparse
import os

import pytest

from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import ConfigError
from apsft_dagster.profile import Choice, environment_choice
from apsft_dagster.resources import ExperimentResource

CHOICE = ("APSFT_PROFILE", "APSFT_CONFIG", "APSFT_STORE_DIR")


@pytest.fixture
def no_choice(monkeypatch):
    """None of the CLI's variables set (each restored after the test)."""
    for name in CHOICE:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return monkeypatch


def test_definitions_for_two_profiles_and_stores_in_one_process(no_choice, tmp_path):
    from apsft_dagster.definitions import definitions_for

    smoke = definitions_for("smoke", store_dir=str(tmp_path / "a"))
    laptop = definitions_for("laptop", store_dir=str(tmp_path / "b"))
    variant = tmp_path / "variant.yaml"
    variant.write_text("extends: smoke\n")
    filed = definitions_for(config_path=str(variant), alerts=False, checked=False)
    partitions = load_config("smoke").digest  # this process's partitions: smoke, as nothing is set
    seen = []
    for defs in (smoke, laptop, filed):
        experiment = defs.resources["experiment"]
        assert all(defs.resources[r].experiment is experiment for r in ("generator", "scorer", "trainer"))
        seen.append((experiment.profile, experiment.config_path, experiment.store_dir, experiment.definitions_digest))
    assert seen == [("smoke", None, str(tmp_path / "a"), partitions), ("laptop", None, str(tmp_path / "b"), partitions),
                    ("smoke", str(variant), None, None)]
    assert os.environ.keys().isdisjoint(CHOICE)  # building them set nothing
    assert smoke.resources["experiment"].store().root == tmp_path / "a"
    with pytest.raises(ConfigError, match=f"resolves to config {load_config('laptop').digest}"):
        laptop.resources["experiment"].config()  # laptop's config, smoke's partitions: refused before a run
    assert len(smoke.sensors) == len(filed.sensors) + 2  # the two alert sensors, unless alerts=False


def test_environment_choice_reads_the_three_variables_empty_as_unset():
    assert environment_choice({}) == Choice("smoke", None, None)
    assert environment_choice({"APSFT_PROFILE": "full", "APSFT_CONFIG": "", "APSFT_STORE_DIR": "s3://b/p"}) == (
        Choice("full", None, "s3://b/p"))
    assert environment_choice({"APSFT_CONFIG": "/x.yaml"}) == Choice("smoke", "/x.yaml", None)


def test_cli_choice_takes_the_arguments_over_the_environment(no_choice, tmp_path):
    from apsft_dagster.cli.args import choice, export_choice

    no_choice.setenv("APSFT_CONFIG", "/elsewhere.yaml")
    no_choice.setenv("APSFT_STORE_DIR", "s3://bucket/env")
    bare = argparse.Namespace(profile=None, config=None, store=None)
    assert choice(bare) == Choice("smoke", "/elsewhere.yaml", "s3://bucket/env")
    no_choice.chdir(tmp_path)
    named = argparse.Namespace(profile="laptop", config=None, store="rel")
    assert export_choice(named) == Choice("laptop", None, str(tmp_path / "rel"))  # --profile drops APSFT_CONFIG
    assert environment_choice() == choice(named)  # what it exported reads back as the same choice


def test_a_resource_without_store_dir_uses_its_profiles_own_store(no_choice, tmp_path):
    no_choice.setenv("APSFT_STATE_DIR", str(tmp_path / "state"))
    no_choice.setenv("APSFT_STORE_DIR", str(tmp_path / "not-read"))  # the resource reads no variable
    assert ExperimentResource(profile="smoke").store().root == tmp_path / "state" / "store" / "smoke"
