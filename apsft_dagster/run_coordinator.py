"""Run coordinators that make a launch from an asset's page run as that asset's stage does.

The UI launches a materialization from an asset's page, the catalog or the lineage under
Dagster's implicit asset job (`__ASSET_JOB`), which carries no tags, so an engine stage's asset
lost its stage's tags there: `apsft/engine: true` (the team instance limits engine runs by it)
and, on Kubernetes, the GPU request. These coordinators give such a run the tags of the one
stage job that holds every asset it selects, before it is queued or launched; a run of a stage's
own job, or one whose assets span stages, is left as it is. The asset checks already run with
their assets in either job.

`apsft_dagster.run_coordinator.StageRunCoordinator` launches at once (Dagster's default; the
generated local instance), `QueuedStageRunCoordinator` queues (the team and Kubernetes instances).
"""

from __future__ import annotations

from dagster._core.definitions.assets.job.asset_job import IMPLICIT_ASSET_JOB_NAME
from dagster._core.run_coordinator import QueuedRunCoordinator, SubmitRunContext
from dagster._core.run_coordinator.sync_in_memory_run_coordinator import SyncInMemoryRunCoordinator
from dagster._core.storage.dagster_run import DagsterRun


def stage_tags(run: DagsterRun, workspace) -> dict[str, str]:
    """The tags an implicit-asset-job run lacks that the stage job holding all its assets carries
    ({} when it is not such a run, or no single stage job holds its assets)."""
    if not run.job_name.startswith(IMPLICIT_ASSET_JOB_NAME) or not run.asset_selection \
            or run.remote_job_origin is None:
        return {}
    origin = run.remote_job_origin.repository_origin
    repository = workspace.get_code_location(origin.code_location_origin.location_name).get_repository(
        origin.repository_name)
    jobs = {node.asset_key: set(node.job_names) for node in repository.get_asset_node_snaps()}
    if not set(run.asset_selection) <= jobs.keys():
        return {}
    common = set.intersection(*(jobs[key] for key in run.asset_selection))
    stages = sorted(j for j in common if not j.startswith(IMPLICIT_ASSET_JOB_NAME))
    if len(stages) != 1:
        return {}
    tags = repository.get_full_job(stages[0]).run_tags
    return {k: v for k, v in tags.items() if k not in run.tags}


class _WithStageTags:
    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        tags = stage_tags(context.dagster_run, context.workspace)
        if tags:
            self._instance.add_run_tags(context.dagster_run.run_id, tags)
            context = SubmitRunContext(self._instance.get_run_by_id(context.dagster_run.run_id), context.workspace)
        return super().submit_run(context)


class StageRunCoordinator(_WithStageTags, SyncInMemoryRunCoordinator):
    """Dagster's default coordinator (runs launch at once), with the stage's tags added."""


class QueuedStageRunCoordinator(_WithStageTags, QueuedRunCoordinator):
    """Dagster's queued coordinator (the daemon launches runs within the instance's limits), with
    the stage's tags added before a run is queued, so the limits see them."""
