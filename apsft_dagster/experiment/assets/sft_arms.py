"""select (6 arms): the SFT datasets, partitioned by arm, and the manifest that checks them."""

import dagster as dg
import polars as pl

from apsft_dagster.assets.common import OWNERS, blocking_checks, check_result, table_preview
from apsft_dagster.core.base_model import load_tokenizer
from apsft_dagster.core.layout import EVIDENCE_SEAL, SFT_MANIFEST, TASK_CATALOG, arm_file, arm_rows
from apsft_dagster.core.seal import verify_seal
from apsft_dagster.core.selection.arms import ARMS, arms_with
from apsft_dagster.core.selection.sft_arms import (
    arm_bytes,
    build_arms,
    manifest,
    manifest_entry,
    manifest_problems,
    provenance,
)
from apsft_dagster.core.store import json_bytes, sha256_bytes
from apsft_dagster.experiment.assets.evidence_seal import evidence_seal
from apsft_dagster.experiment.partitions import arm_partitions
from apsft_dagster.resources import ExperimentResource


def _select(experiment: ExperimentResource) -> dict[str, pl.DataFrame]:
    """The fail-closed gate first: no selection from evidence that differs from the seal."""
    config, store = experiment.config(), experiment.store()
    verify_seal(store, config)
    return build_arms(store, config, store.get_parquet(TASK_CATALOG), load_tokenizer(config, store))


@dg.asset(partitions_def=arm_partitions, backfill_policy=dg.BackfillPolicy.single_run(), deps=[evidence_seal],
          group_name="selection", kinds={"polars", "json"}, owners=OWNERS)
def sft_arms(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    """Selects all six arms at once (balance asserted before anything is written) and writes the
    requested arms: gzip JSON lines for training, a provenance Parquet for the SQL audits."""
    store, arms = experiment.store(), _select(experiment)
    digests = {}
    for arm in context.partition_keys:
        digests[arm] = store.put_bytes(arm_file(arm), arm_bytes(arms[arm]))
        store.put_parquet(arm_rows(arm), provenance(arms[arm]))
        rows = arms[arm]
        modes = dict(sorted(rows.group_by("mode").len().iter_rows()))
        context.add_asset_metadata({"sha256": digests[arm], "rows": rows.height, "tasks": rows["task_id"].n_unique(),
                                    "unique_sources": rows["source_trace_id"].n_unique(),
                                    "thought_tokens": int(rows["n_thought_tokens"].sum()),
                                    "modes": ", ".join(f"{m} {n}" for m, n in modes.items())}, partition_key=arm)
        context.log.info(f"{arm}: {rows.height} rows, sha256 {digests[arm]}")
    return dg.MaterializeResult(metadata={"arms": len(digests), **{f"{a}_sha256": d for a, d in digests.items()}},
                                data_version=dg.DataVersion(sha256_bytes(json_bytes(digests))))


MANIFEST_CHECKS = {
    "per_cell_balance": (f"every arm but {', '.join(arms_with(balanced=False))}: each (family, level) cell "
                         "holds tasks.train.per_cell tasks x 2 rows"),
    "rows_per_arm": "every arm holds 2 x (train tasks) rows",
    "byte_identical_rerun": "selection rerun in memory gives files with the stored SHA-256s",
}


@dg.asset(deps=[sft_arms], group_name="selection", kinds={"json"}, owners=OWNERS,
          check_specs=blocking_checks("sft_manifest", MANIFEST_CHECKS))
def sft_manifest(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    """Each arm file's SHA-256, rows, sources, modes, dose and device-hour envelope; its hash is
    the experiment's identity."""
    config, store = experiment.config(), experiment.store()
    stored = {arm: store.verify(arm_file(arm)) for arm in ARMS}  # hashed in blocks, not held in memory
    rows = {arm: store.get_parquet(arm_rows(arm)) for arm in ARMS}
    rerun = _select(experiment)
    entries = [manifest_entry(arm, rows[arm], stored[arm], config) for arm in ARMS]
    digest = store.put_json(SFT_MANIFEST, manifest(entries, store.verify(EVIDENCE_SEAL), config))
    problems = manifest_problems(rows, stored, rerun, config.tasks.train)
    summary = pl.DataFrame(entries).select("arm", "rows", "tasks", "unique_sources", "thought_tokens", "forward_tokens")
    return dg.MaterializeResult(
        metadata={"manifest_sha256": digest, "arms": table_preview(summary),
                  "forward_tokens": sum(e["forward_tokens"] for e in entries)},
        data_version=dg.DataVersion(digest),
        check_results=[check_result(name, problems[name]) for name in MANIFEST_CHECKS],
    )
