"""evidence seal: validate the whole raw/score/R1 bank read-only, then bind it for selection."""

import dagster as dg
import polars as pl

from apsft_dagster.assets.common import OWNERS, table_preview
from apsft_dagster.core.layout import SEALED_CONFIG
from apsft_dagster.core.seal import seal
from apsft_dagster.experiment.assets.base_model import base_model
from apsft_dagster.experiment.assets.r1_labels import r1_labels_index
from apsft_dagster.experiment.assets.score_bank import parity_gate, score_bank_index
from apsft_dagster.experiment.assets.trace_bank import trace_bank_index
from apsft_dagster.resources import ExperimentResource


@dg.asset(deps=[trace_bank_index, parity_gate, score_bank_index, r1_labels_index, base_model],
          group_name="seal", kinds={"json"}, owners=OWNERS)
def evidence_seal(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    """Fails closed (SealError listing every problem) when any shard, scope or join is wrong;
    otherwise writes `evidence_seal.json` and, beside it, the config body whose digest it binds
    (`evidence_seal_config.json`). Amendments appear classified, derived from evidence."""
    store, config = experiment.store(), experiment.config()
    doc, digest = seal(store, config)
    store.put_json(SEALED_CONFIG, config.registered.digest_body)  # the fields behind the digest the seal binds
    records = doc["amendments"]["records"]
    context.log.info(f"sealed {doc['eligible']} eligible traces, {len(records)} amendments: {digest}")
    amendments = pl.DataFrame([{k: r[k] for k in ("seq", "date", "classification", "text")} for r in records],
                              schema={"seq": pl.Int64, "date": pl.String, "classification": pl.String,
                                      "text": pl.String})
    return dg.MaterializeResult(
        metadata={"seal_sha256": digest, "traces": doc["traces"], "eligible": doc["eligible"],
                  "config_digest": doc["config_digest"], "base_model_fingerprint": doc["base_model_fingerprint"],
                  **{f"{bank}_index": b["index_sha256"] for bank, b in doc["banks"].items()},
                  "sealed_code_files": len(doc["code"]), "amendments": table_preview(amendments, rows=50)},
        data_version=dg.DataVersion(digest),
    )
