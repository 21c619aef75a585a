"""A declared rehearsal (issue 37): `laptop_rehearsal` is `laptop` with only Stage A's trigger
thresholds changed, each line saying its registered value; the loader refuses any other change;
its digest differs while its Stage A binds the registered profile's; and a rehearsal run on a
store where the registered profile ran keeps every byte of Stage A and labels every verdict."""

import hashlib
import json
import shutil

import dagster as dg
import pytest
import yaml

from apsft_dagster.core.config import (
    TRIGGER_FIELDS,
    UNSEALED_SECTIONS,
    canonical_json,
    late_defaults_dropped,
    load_config,
)
from apsft_dagster.core.errors import ConfigError
from apsft_dagster.core.paths import CONFIG_DIR
from apsft_dagster.core.rehearsal import LABEL

REHEARSAL = CONFIG_DIR / "laptop_rehearsal.yaml"
SMOKE = CONFIG_DIR / "smoke.yaml"


def test_the_rehearsal_is_laptop_sealed_as_laptop_under_a_digest_of_its_own():
    config, laptop = load_config("laptop_rehearsal"), load_config("laptop")
    assert (config.profile, config.rehearsal) == ("laptop_rehearsal", "laptop")
    assert config.digest != laptop.digest
    assert (config.sealed_profile, config.sealed_digest) == ("laptop", laptop.digest)
    assert (laptop.sealed_profile, laptop.sealed_digest) == ("laptop", laptop.digest)
    assert config.stage_b.min_gain < laptop.stage_b.min_gain
    assert config.stage_b.min_lower_bound < laptop.stage_b.min_lower_bound


def test_a_registered_profiles_digest_does_not_bind_the_absent_rehearsal_key():
    """The key arrived after every stored receipt: a registered profile's digest stays as it was."""
    laptop = load_config("laptop")
    dump = laptop.model_dump(mode="json", exclude=set(UNSEALED_SECTIONS))
    assert dump.pop("rehearsal") is None
    assert laptop.digest == hashlib.sha256(canonical_json(late_defaults_dropped(dump))).hexdigest()


def test_every_rehearsal_line_says_it_is_one_and_the_registered_value():
    text = REHEARSAL.read_text()
    raw, laptop = yaml.safe_load(text), load_config("laptop")
    assert set(raw) == {"extends", "profile", "rehearsal", "stage_b"} and raw["extends"] == raw["rehearsal"]
    lines = [line for line in text.split("# ---- rehearsal values", 1)[1].splitlines()[1:]
             if line.strip() and not line.lstrip().startswith("#")]
    for key in raw["stage_b"]:
        assert key in TRIGGER_FIELDS
        line = next(li for li in lines if li.strip().startswith(f"{key}:"))
        registered = getattr(laptop.stage_b, key)
        assert f"rehearsal value; registered {registered:g}" in line, line


def _profile(tmp_path, body: dict, name="r.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"extends": str(SMOKE), "profile": "smoke_rehearsal", "rehearsal": str(SMOKE),
                                    **body}))
    return path


def test_a_rehearsal_that_changes_anything_but_the_thresholds_is_refused_by_field(tmp_path):
    path = _profile(tmp_path, {"stage_b": {"min_gain": 0.0, "k_samples": 3}, "harvest": {"samples_per_task": 4}})
    with pytest.raises(ConfigError) as err:
        load_config(path=path)
    assert "stage_b.k_samples" in str(err.value) and "harvest.samples_per_task" in str(err.value)
    assert str(path) in str(err.value)


def test_a_rehearsal_must_change_a_threshold_and_rehearse_a_registered_profile(tmp_path):
    with pytest.raises(ConfigError, match="no trigger threshold differs"):
        load_config(path=_profile(tmp_path, {}))
    first = _profile(tmp_path, {"stage_b": {"min_gain": 0.0}})
    second = tmp_path / "r2.yaml"
    second.write_text(yaml.safe_dump({"extends": str(first), "profile": "again", "rehearsal": str(first),
                                      "stage_b": {"min_gain": 0.01}}))
    with pytest.raises(ConfigError, match="is itself a rehearsal"):
        load_config(path=second)


def test_a_lower_bound_threshold_lies_between_minus_one_and_one(tmp_path):
    with pytest.raises(ConfigError, match="stage_b.min_lower_bound"):
        load_config(path=_profile(tmp_path, {"stage_b": {"min_lower_bound": -1.5}}))
    assert load_config(path=_profile(tmp_path, {"stage_b": {"min_lower_bound": -1.0}})).stage_b.min_lower_bound == -1


def test_only_a_rehearsal_may_ask_for_a_gain_below_zero(tmp_path):
    """A negative `min_gain` would pass a treatment that trails its baseline: a registered profile is
    refused by file and field, a declared rehearsal accepts it (down to -1, a difference of shares)."""
    registered = tmp_path / "own.yaml"
    registered.write_text(yaml.safe_dump({"extends": str(SMOKE), "profile": "own", "stage_b": {"min_gain": -0.01}}))
    with pytest.raises(ConfigError, match=r"stage_b\.min_gain: -0\.01 is below 0.*only a declared rehearsal") as err:
        load_config(path=registered)
    assert str(registered) in str(err.value)
    assert load_config(path=_profile(tmp_path, {"stage_b": {"min_gain": -1.0}})).stage_b.min_gain == -1
    with pytest.raises(ConfigError, match="stage_b.min_gain"):
        load_config(path=_profile(tmp_path, {"stage_b": {"min_gain": -1.5}}))


def test_validate_declares_the_rehearsal_in_the_words_run_prints(capsys):
    from apsft_dagster.cli import main

    assert main(["validate", "--profile", "laptop_rehearsal"]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    sealed = load_config("laptop").digest[:12]
    assert line == (f"  a {LABEL} of laptop: Stage A is laptop's (sealed as config {sealed}); "
                    "changed: stage_b.min_gain -1 (registered 0.03), stage_b.min_lower_bound -1 (registered 0)")


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()
            and p.suffix not in (".duckdb", ".lock")}


@pytest.mark.slow
def test_a_rehearsal_on_a_finished_store_keeps_stage_a_and_labels_every_verdict(smoke_run, tmp_path):
    """Every stage of a smoke rehearsal on a copy of command 1's store: every Stage A byte stays (the
    seal verifies as smoke's); the decision, Stage B's verdict, the report and the CLI's verdict line
    are the rehearsal's, labelled, with the registered thresholds' verdict beside them."""
    from apsft_dagster.cli.experiment.presentation import verdict_line
    from apsft_dagster.core.layout import REPORT_MARKDOWN, STAGE_A_DECISION, STAGE_B_DECISION
    from apsft_dagster.core.store import Store
    from apsft_dagster.experiment.stages import STAGES
    from apsft_dagster.runner import run_stages
    from conftest import smoke_definitions

    _, source = smoke_run
    store = Store(tmp_path / "store")
    shutil.copytree(source.root, store.root)
    before = _files(store.root)
    config = _profile(tmp_path, {"stage_b": {"min_gain": 0.0, "min_lower_bound": -1.0}})
    instance = dg.DagsterInstance.ephemeral()
    outcomes = run_stages(smoke_definitions(store.root, config_path=str(config)), instance, STAGES, alert=False)
    assert all(o.ok for o in outcomes), [o.job for o in outcomes if not o.ok]
    after = _files(store.root)
    changed = sorted(k for k in before if after.get(k) != before[k])
    decided = ("stage_a_analysis/", "stage_b_analysis/", "report/")  # the decision and all after it
    assert changed and all(k.startswith(decided) for k in changed), changed
    assert set(after) == set(before)
    analysis, final = store.get_json(STAGE_A_DECISION), store.get_json(STAGE_B_DECISION)
    registered = json.loads(before[f"{STAGE_A_DECISION}"])
    assert analysis["rehearsal"]["registered_verdict"] == registered["verdict"]
    assert analysis["rehearsal"]["changed"] == {"stage_b.min_gain": {"rehearsal": 0.0, "registered": 0.03},
                                                "stage_b.min_lower_bound": {"rehearsal": -1.0, "registered": 0.0}}
    assert analysis["decision"]["thresholds"]["min_gain"] == 0.0 and final["rehearsal"] == analysis["rehearsal"]
    report = store.get_bytes(REPORT_MARKDOWN).decode()
    assert report.splitlines()[0] == f"# Experiment report (smoke_rehearsal profile): {LABEL}"
    assert f"- Final verdict: **{final['final_verdict']}** [{LABEL}]" in report
    assert f"[{LABEL}]" in verdict_line(store)
    def shown(asset: str, key: str) -> str:  # what the UI shows in the asset's latest materialization
        event = instance.get_latest_materialization_event(dg.AssetKey(asset))
        return event.asset_materialization.metadata[key].value

    assert shown("stage_b_analysis", "final_verdict") == f"{final['final_verdict']} [{LABEL}]"
    assert shown("experiment_report", "verdict") == f"{final['final_verdict']} [{LABEL}]"
    assert shown("stage_a_analysis", "verdict") == f"{analysis['verdict']} [{LABEL}]"
