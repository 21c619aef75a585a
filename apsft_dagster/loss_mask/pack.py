"""loss-mask packing: the verified build packed into fixed-length packs with its loss mask, and
the unmasked base packed the same way for the seed's comparison table."""

import dagster as dg
import polars as pl

from apsft_dagster.assets.common import OWNERS, check_result, table_preview
from apsft_dagster.core.base_model import base_model_path
from apsft_dagster.core.loss_mask.datasets import HashingLines, registered
from apsft_dagster.core.loss_mask.names import GROUP, MASKED, lm_file
from apsft_dagster.core.loss_mask.pack import pack_into_store, rows_accounted
from apsft_dagster.core.loss_mask.pack_compare import pack_comparison
from apsft_dagster.core.loss_mask.pack_inputs import load_pack_tokenizer, registered_template, tokenizer_folder
from apsft_dagster.core.loss_mask.pack_write import read_dropped
from apsft_dagster.core.loss_mask.settings import loss_mask_settings
from apsft_dagster.loss_mask.assets import lm_verify
from apsft_dagster.loss_mask.partitions import lm_dataset_partitions
from apsft_dagster.resources import ExperimentResource

FIGURES = ("rows_in", "rows_packed", "packs", "tokens", "efficiency", "trainable_tokens", "masked_assistant_tokens",
           "loss_coverage", "rows_no_trainable", "rows_over_limit", "span_anomalies")


def _pack(store, config, dataset: str, name: str, lines, source: str) -> tuple[str, dict]:
    """Pack `lines` with the dataset's tokenizer and template (its own when registered with them, else the
    base model's): (digest, report with the tokenizer's digest)."""
    record = registered(store, dataset)
    tokenizer, digest = load_pack_tokenizer(tokenizer_folder(record, lambda: base_model_path(config, store)))
    packs, report = pack_into_store(store, lm_file(dataset, name), lines, tokenizer, loss_mask_settings(config),
                                    chat_template=registered_template(record), fmt=record.get("format", "native"),
                                    source=source)
    return packs, {**report, "tokenizer": record.get("tokenizer") or "base model", "tokenizer_sha256": digest}


# base_model is the experiment's asset (by key): packing tokenizes with its tokenizer unless the dataset has its own
@dg.asset(partitions_def=lm_dataset_partitions, deps=[lm_verify, "base_model"], group_name=GROUP,
          kinds={"parquet"}, owners=OWNERS,
          check_specs=[dg.AssetCheckSpec("rows_accounted", asset="lm_pack", blocking=True,
                                         description="rows in = rows packed + fully masked + over the limit; "
                                                     "span anomalies = 0")])
def lm_pack(context: dg.AssetExecutionContext, experiment: ExperimentResource):
    """The masked build tokenized with the dataset's tokenizer and chat template (the base model's unless
    registered with its own), each message's span found from character offsets, the loss mask set
    (assistant tokens, reasoning included, minus masked turns), streamed into `pack_length` packs in
    `shards` Parquet shards, deterministically from the row order, `pack_seed` and `pack_window`."""
    config, store, dataset = experiment.config(), experiment.store(), context.partition_key
    store.verify(lm_file(dataset, "build"))
    with open(store.path(lm_file(dataset, "build")) / MASKED, "rb") as lines:
        digest, report = _pack(store, config, dataset, "packs", lines, MASKED)
    store.put_json(lm_file(dataset, "pack.json"), {**report, "packs_sha256": digest})
    yield dg.MaterializeResult(metadata={k: report[k] for k in FIGURES}, data_version=dg.DataVersion(digest))
    yield check_result("rows_accounted", rows_accounted(report))


@dg.asset(partitions_def=lm_dataset_partitions, deps=[lm_pack], group_name=GROUP, kinds={"parquet", "json"},
          owners=OWNERS,
          check_specs=[dg.AssetCheckSpec("differences_accounted", asset="lm_pack_comparison", blocking=True,
                                         description="every difference from packing the unmasked base is a "
                                                     "dropped fully-masked row")])
def lm_pack_comparison(context: dg.AssetExecutionContext, experiment: ExperimentResource):
    """The unmasked base packed the same way (same tokenizer, pack length, seed, window and row order) and
    the seed's table: rows in, rows packed, packs, tokens, efficiency, rows over the limit, deltas."""
    config, store, dataset = experiment.config(), experiment.store(), context.partition_key
    lines = HashingLines(registered(store, dataset))
    digest, base = _pack(store, config, dataset, "base_packs", lines, "the registered file")
    lines.check()
    store.put_json(lm_file(dataset, "base_pack.json"), {**base, "packs_sha256": digest})
    result = pack_comparison(base, store.get_json(lm_file(dataset, "pack.json")),
                             read_dropped(store.path(lm_file(dataset, "base_packs"))),
                             read_dropped(store.path(lm_file(dataset, "packs"))))
    compared = store.put_json(lm_file(dataset, "comparison.json"), result)
    context.log.info(f"{dataset}: " + "; ".join(f"{r['metric']} {r['base']} -> {r['masked']}" for r in result["table"]))
    yield dg.MaterializeResult(metadata={"accounted": result["accounted"],
                                         "table": table_preview(pl.DataFrame(result["table"]).cast(pl.String))},
                               data_version=dg.DataVersion(compared))
    yield check_result("differences_accounted", result["problems"])
