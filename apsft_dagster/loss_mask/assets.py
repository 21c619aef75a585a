"""loss-mask curation of agentic SFT data, partitioned by dataset version: census -> build -> verify, each a
gate (packing in pack.py). Each asset streams the registered file; the core does the work."""

import dagster as dg
import polars as pl

from apsft_dagster.assets.common import OWNERS, check_result, table_preview
from apsft_dagster.core.loss_mask.build import build_problems, rules_record
from apsft_dagster.core.loss_mask.census import census_table
from apsft_dagster.core.loss_mask.datasets import check_unchanged, dataset_format, registered
from apsft_dagster.core.loss_mask.flags_file import ExternalFlags
from apsft_dagster.core.loss_mask.names import FLAGS, GROUP, MASKED, lm_file
from apsft_dagster.core.loss_mask.parallel import build_file, census_file
from apsft_dagster.core.loss_mask.rules import LossMaskError
from apsft_dagster.core.loss_mask.settings import loss_mask_settings, rule_settings
from apsft_dagster.core.loss_mask.verify import verify
from apsft_dagster.loss_mask.partitions import lm_dataset_partitions
from apsft_dagster.resources import ExperimentResource


@dg.asset(partitions_def=lm_dataset_partitions, group_name=GROUP, kinds={"json", "parquet"}, owners=OWNERS,
          check_specs=[dg.AssetCheckSpec("source_unchanged", asset="lm_census", blocking=True,
                                         description="the file read hashes to what was registered")])
def lm_census(context: dg.AssetExecutionContext, experiment: ExperimentResource):
    """Measure only (never writes the data): per-reason totals, the union, rows touched, every
    reason combination, the left-alone counts, in total and per source."""
    config, store, dataset = experiment.config(), experiment.store(), context.partition_key
    record = registered(store, dataset)
    try:
        check_unchanged(record)
    except LossMaskError as exc:
        yield dg.MaterializeResult(metadata={"source_sha256": record["sha256"], "error": str(exc)})
        yield check_result("source_unchanged", [str(exc)])
        return
    settings = loss_mask_settings(config)
    counted = census_file(record["path"], workers=settings.workers, fmt=dataset_format(record),
                          **rule_settings(settings))
    table = census_table(dataset, counted)
    store.put_json(lm_file(dataset, "census.json"), counted)
    store.put_parquet(lm_file(dataset, "census.parquet"), table)
    total = counted["total"]
    context.log.info(f"{dataset}: {total['rows']} rows, {total['masked_turns']} turns to mask ({total['reasons']})")
    yield dg.MaterializeResult(metadata={
        **{k: v for k, v in total.items() if isinstance(v, int)}, "reasons": dg.MetadataValue.json(total["reasons"]),
        "combinations": dg.MetadataValue.json(total["combinations"]),
        "left_alone": dg.MetadataValue.json(total["left_alone"]), "source_sha256": record["sha256"],
        "skipped": dg.MetadataValue.json(total["skipped"]), "row_ids": dg.MetadataValue.json(total["row_ids"]),
        "by_source": table_preview(table.filter(pl.col("kind") == "reasons")
                                   .pivot("name", index="source", values="count"), rows=20)},
        data_version=dg.DataVersion(record["sha256"]))
    yield check_result("source_unchanged", [])


@dg.asset(partitions_def=lm_dataset_partitions, deps=[lm_census], group_name=GROUP, kinds={"json"}, owners=OWNERS,
          check_specs=[dg.AssetCheckSpec("counts_equal_census", asset="lm_build", blocking=True,
                                         description="rows in = rows out, and masked turns per reason = the census's")])
def lm_build(context: dg.AssetExecutionContext, experiment: ExperimentResource):
    """One streaming pass: `"step_loss_mask": 0` on each flagged assistant turn, nothing else; an
    untouched row is written as its original bytes; a flags file, one line per masked turn. With a
    registered external flags file (its digest checked now), exactly its turns are masked and the
    gate compares with its counts instead of the census's."""
    config, store, dataset = experiment.config(), experiment.store(), context.partition_key
    record, census = registered(store, dataset), store.get_json(lm_file(dataset, "census.json"))["total"]
    settings, report = loss_mask_settings(config), {}
    external = ExternalFlags(record["flags"]["path"], record["flags"]["sha256"]) if record.get("flags") else None
    counted = census if external is None else {"rows": census["rows"], **external.counts()}

    def fill(folder) -> None:
        with open(folder / MASKED, "wb") as out, open(folder / FLAGS, "wb") as flags:
            report.update(build_file(record["path"], out, flags, expected_reasons=counted["reasons"],
                                     workers=settings.workers, fmt=dataset_format(record), flags=external,
                                     **rule_settings(settings)))
        check_unchanged(record, report["base_sha256"])

    digest = store.put_dir(lm_file(dataset, "build"), fill)
    store.put_json(lm_file(dataset, "build.json"), {
        **report, "dataset": dataset, "format": dataset_format(record), "build_sha256": digest,
        "flags_source": "rules" if external is None else record["flags"], "rules": rules_record(settings, census)})
    yield dg.MaterializeResult(metadata={**{k: v for k, v in report.items() if not isinstance(v, dict)},
                                         "reasons": dg.MetadataValue.json(report["reasons"])},
                               data_version=dg.DataVersion(digest))
    yield check_result("counts_equal_census", build_problems(report, counted))


@dg.asset(partitions_def=lm_dataset_partitions, deps=[lm_build], group_name=GROUP, kinds={"json"}, owners=OWNERS,
          check_specs=[dg.AssetCheckSpec("verified", asset="lm_verify", blocking=True,
                                         description="separate code read both files back: only the flagged turns "
                                                     "changed, each with its recorded content digest")])
def lm_verify(context: dg.AssetExecutionContext, experiment: ExperimentResource):
    """Reads the registered base and the built files back from disk and proves the build did only
    what its flags say (core/loss_mask/verify.py); any difference names the row."""
    store, dataset = experiment.store(), context.partition_key
    record = registered(store, dataset)
    store.verify(lm_file(dataset, "build"))
    folder = store.path(lm_file(dataset, "build"))
    known_broken = rule_settings(loss_mask_settings(experiment.config()))["known_broken_families"]
    try:
        result, problems = verify(record["path"], folder / MASKED, folder / FLAGS, known_broken_families=known_broken,
                                  fmt=dataset_format(record), rule_flags=not record.get("flags")), []
    except LossMaskError as exc:
        result, problems = {"error": str(exc)}, [str(exc)]
    digest = store.put_json(lm_file(dataset, "verify.json"), {"dataset": dataset, "passed": not problems, **result})
    yield dg.MaterializeResult(metadata={"passed": not problems, **{k: v for k, v in result.items()}},
                               data_version=dg.DataVersion(digest))
    yield check_result("verified", problems)
