"""model: the base policy. smoke trains the embedded tiny model (Qwen3.5's layout); full fingerprints a
local snapshot."""

import dagster as dg

from apsft_dagster.assets.common import OWNERS, log_and_show
from apsft_dagster.core.base_model import inspect_model_dir, load_tokenizer
from apsft_dagster.core.embedded.cache import embedded_model
from apsft_dagster.core.layout import BASE_MODEL_DIR, BASE_MODEL_REPORT, TASK_CATALOG
from apsft_dagster.core.paths import local_model_dir
from apsft_dagster.core.progress import paced
from apsft_dagster.core.snapshot import describe_snapshot, lora_targets
from apsft_dagster.core.task_file.source import task_catalog as task_catalog_of
from apsft_dagster.core.text_protocol import for_config, require_prompts
from apsft_dagster.experiment.assets.task_catalog import task_catalog
from apsft_dagster.resources import ExperimentResource


@dg.asset(deps=[task_catalog], group_name="model", kinds={"pytorch", "transformers"}, owners=OWNERS)
def base_model(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    """The policy every stage samples from, scores with and fine-tunes; its fingerprint is sealed.
    The embedded model comes from the content-addressed cache when its key is there (`cache`:
    hit / miss / off in the metadata); `path` is relative to the store (embedded) or as configured."""
    config = experiment.config()
    store = experiment.store()
    if config.model.source == "local":
        found = inspect_model_dir(local_model_dir(config.model.path), config.protocol)
        catalog = task_catalog_of(config)  # every prompt of every split, as the task_catalog asset writes them
        require_prompts(for_config(config), load_tokenizer(config, store), dict(zip(catalog["task_id"],
                                                                                     catalog["prompt"])))
        report = {"source": "local", "name": config.model.name, "revision": config.model.revision,
                  "path": config.model.path, "model_type": found["model_type"], "snapshot": found["snapshot"],
                  "fingerprint": found["fingerprint"], "files": len(found["files"])}
    else:
        prompts = store.get_parquet(TASK_CATALOG)["prompt"].to_list()
        built: dict = {}

        def fill(out_dir):
            built.update(embedded_model(config, prompts, out_dir, paced(log_and_show(context))))

        fingerprint = store.put_dir(BASE_MODEL_DIR, fill)
        report = {"source": "embedded", "name": config.model.name, "path": BASE_MODEL_DIR,
                  "snapshot": describe_snapshot(store.path(BASE_MODEL_DIR)), "fingerprint": fingerprint, **built}
    report["config_digest"] = config.sealed_digest  # a rehearsal's Stage A is its registered one's
    cache = {k: report.pop(k) for k in ("cache", "cache_key") if k in report}  # how, not what: kept out of the file
    store.put_json(BASE_MODEL_REPORT, report)
    context.log.info(f"base model {report['name']}: fingerprint {report['fingerprint']}")
    shown = {k: v for k, v in report.items() if k != "snapshot"}
    shown.update({f"snapshot_{k}": v for k, v in report["snapshot"].items()}, **cache,
                 lora_targets=lora_targets(report["snapshot"], config.training.target_modules))
    return dg.MaterializeResult(metadata=shown, data_version=dg.DataVersion(report["fingerprint"]))
