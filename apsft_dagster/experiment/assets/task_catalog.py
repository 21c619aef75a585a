"""tasks: the catalog of train and sealed eval tasks, with its protocol checks."""

import dagster as dg

from apsft_dagster.assets.common import OWNERS, blocking_checks, check_result, table_preview
from apsft_dagster.core.layout import TASK_CATALOG
from apsft_dagster.core.task_file.source import task_catalog as profile_catalog
from apsft_dagster.core.tasks.catalog import check_answer_not_in_prompt, check_cell_counts, check_firewall
from apsft_dagster.resources import ExperimentResource

CHECKS = {
    "cell_counts": "every (split, family, level) cell holds exactly its configured number of tasks",
    "eval_train_firewall": "no eval prompt equals a train prompt",
    "answer_not_in_prompt": "no prompt carries an ANSWER: line",
}


@dg.asset(
    group_name="tasks", kinds={"python", "polars", "parquet"}, owners=OWNERS,
    check_specs=blocking_checks("task_catalog", CHECKS),
)
def task_catalog(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    """Train tasks (first `per_cell` per train cell) and the three sealed eval splits, from the builders or the
    task file `tasks.source` names (docs/task-files.md)."""
    config = experiment.config()
    catalog = profile_catalog(config)
    digest = experiment.store().put_parquet(TASK_CATALOG, catalog)
    problems = {
        "cell_counts": check_cell_counts(catalog, config),
        "eval_train_firewall": check_firewall(catalog),
        "answer_not_in_prompt": check_answer_not_in_prompt(catalog),
    }
    split_counts = dict(catalog.group_by("split").len().sort("split").iter_rows())
    context.log.info(f"task catalog: {split_counts}")
    return dg.MaterializeResult(
        metadata={"profile": config.profile, "config_digest": config.digest, "sha256": digest,
                  **({"task_source": config.tasks.source, "task_source_sha256": config.tasks.source_sha256}
                     if config.tasks.source else {}),
                  "tasks": catalog.height, **{f"tasks_{k}": v for k, v in split_counts.items()},
                  "preview": table_preview(catalog.select("task_id", "split", "family", "level", "answer"))},
        data_version=dg.DataVersion(digest),
        check_results=[check_result(name, found) for name, found in problems.items()],
    )
