"""A launch from an asset's page runs as its stage does: the UI's own GraphQL launch (Dagster's
implicit asset job, as the asset page, the catalog and the lineage send it) against the project's
code location, on an instance with apsft's queued coordinator, so the runs wait in the queue and
their tags can be read."""

import dagster as dg
import pytest

from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.run_tags import ENGINE_TAG, K8S_CONFIG_TAG

INSTANCE = """\
telemetry:
  enabled: false
run_coordinator:
  module: apsft_dagster.run_coordinator
  class: QueuedStageRunCoordinator
"""


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    """(instance, workspace request context, remote repository) with the code location loaded as
    the webserver loads it, in a pod (so the engine stages carry the GPU request too)."""
    from dagster_graphql.test.utils import define_out_of_process_context

    home = tmp_path_factory.mktemp("dagster_home")
    (home / "dagster.yaml").write_text(INSTANCE)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DAGSTER_HOME", str(home))
        env.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # the code server reads it at load
        with dg.DagsterInstance.get() as instance, \
                define_out_of_process_context(str(PROJECT_ROOT / "workspace.yaml"), None, instance) as context:
            location = context.code_locations[0]
            yield instance, context, location.get_repository("__repository__")


def _launch(ui, assets: list[str], partition: str | None = None) -> dg.DagsterRun:
    from dagster_graphql.test.utils import materialize_assets

    instance, context, _ = ui
    result = materialize_assets(context, [dg.AssetKey(a) for a in assets], [partition] if partition else None)
    result = result[0] if isinstance(result, list) else result
    launched = result.data["launchPipelineExecution"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return instance.get_run_by_id(launched["run"]["runId"])


def _added(run: dg.DagsterRun) -> dict[str, str]:
    return {k: v for k, v in run.tags.items() if k.startswith("apsft/") or k == K8S_CONFIG_TAG}


@pytest.mark.slow
def test_an_engine_asset_launched_from_its_page_carries_its_stages_tags(ui):
    _, _, repository = ui
    run = _launch(ui, ["adapters"], "answer_potential-seed42")
    stage = dict(repository.get_full_job("adapters_job").run_tags)
    assert run.job_name == "__ASSET_JOB" and run.status == dg.DagsterRunStatus.QUEUED
    assert stage[ENGINE_TAG] == "true" and K8S_CONFIG_TAG in stage  # the stage's tags, GPU request included
    assert _added(run) == stage
    assert run.tags["dagster/partition"] == "answer_potential-seed42"


def test_a_cpu_asset_or_a_selection_across_stages_gets_no_engine_tag(ui):
    assert _added(_launch(ui, ["sft_manifest"])) == {}  # its stage carries no tags
    assert _added(_launch(ui, ["evidence_seal", "sft_manifest"])) == {}  # no one stage holds both


@pytest.mark.slow
def test_every_check_runs_with_its_asset_in_the_assets_job_as_in_its_stage(ui):
    """Same checks: each asset check is in the implicit asset job and in its asset's stage job."""
    from apsft_dagster.experiment.stages import STAGES

    _, _, repository = ui
    stage_of = {a.key: s.job for s in STAGES for a in s.assets}
    checks = [c for c in repository.repository_snap.asset_check_nodes if c.asset_key in stage_of]
    assert len(checks) >= 20
    for check in checks:
        assert {"__ASSET_JOB", stage_of[check.asset_key]} <= set(check.job_names), check.name
