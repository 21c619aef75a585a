"""A rerun on a finished store keeps what it can prove unchanged: a kept merged model's probe and
the generation audit are reused when their recorded inputs match, and recomputed, to the same
bytes, when those records are gone or differ."""

import shutil

import dagster as dg

from apsft_dagster.core.config import load_config
from apsft_dagster.core.layout import GENERATION_AUDIT, GENERATION_AUDIT_INPUTS, probe_report
from apsft_dagster.core.policies import stage_a_policies
from apsft_dagster.core.store import Store
from conftest import StageRuns, smoke_definitions

STAGE_A = stage_a_policies(load_config("smoke"))
JOBS = ("merged_models_job", "stage_a_analysis_job")


def _rerun(store: Store) -> dict[str, StageRuns]:
    from apsft_dagster.experiment.stages import STAGES
    from apsft_dagster.runner import run_stages

    instance = dg.DagsterInstance.ephemeral()
    outcomes = run_stages(smoke_definitions(store.root), instance, [s for s in STAGES if s.job in JOBS], alert=False)
    assert [o.job for o in outcomes] == list(JOBS) and all(o.ok for o in outcomes), outcomes
    return {o.job: StageRuns(instance, o) for o in outcomes}


def _messages(runs: StageRuns) -> list[str]:
    return [entry.user_message for run in runs.outcome.run_ids for entry in runs.instance.all_logs(run)]


def _audit_action(runs: StageRuns) -> str:
    events = runs.get_asset_materialization_events()
    event = next(e for e in events if e.asset_key.to_user_string() == "generation_audit")
    return event.materialization.metadata["action"].value


def test_a_rerun_keeps_probes_and_the_generation_audit_and_recomputes_them_to_the_same_bytes(smoke_run, tmp_path):
    _, finished = smoke_run
    store = Store(tmp_path / "store")
    shutil.copytree(finished.root, store.root)
    names = [probe_report(p) for p in STAGE_A] + [GENERATION_AUDIT]
    before = {name: store.verify(name) for name in names}

    runs = _rerun(store)
    probed = [m for m in _messages(runs["merged_models_job"]) if "weights changed" in m]
    assert len(probed) == len(STAGE_A) and all(": kept, probe kept," in m for m in probed), probed
    assert _audit_action(runs["stage_a_analysis_job"]) == "kept"
    assert {name: store.verify(name) for name in names} == before

    # the records gone or differing: both are computed again, and give the bytes they had
    store.remove(probe_report(STAGE_A[0]))
    store.remove(GENERATION_AUDIT_INPUTS)
    runs = _rerun(store)
    lines = [m for m in _messages(runs["merged_models_job"]) if "weights changed" in m]
    assert sum(": kept, probed," in m for m in lines) == 1 and f"{STAGE_A[0]}: kept, probed," in "".join(lines)
    assert _audit_action(runs["stage_a_analysis_job"]) == "computed"
    assert {name: store.verify(name) for name in names} == before

    inputs = store.get_json(GENERATION_AUDIT_INPUTS)
    store.put_json(GENERATION_AUDIT_INPUTS, {**inputs, "thresholds": {**inputs["thresholds"], "ngram_words": 99}})
    assert _audit_action(_rerun(store)["stage_a_analysis_job"]) == "computed"
    assert store.verify(GENERATION_AUDIT) == before[GENERATION_AUDIT]
    assert store.get_json(GENERATION_AUDIT_INPUTS) == inputs
