"""merge + deployment probe (policies): every LoRA pair merged and proven, then a greedy difference from base.

`merged_models` holds Stage A's six; `replication_merged_models` the replication seed's Stage B asks for."""


import dagster as dg

from apsft_dagster import workers
from apsft_dagster.assets.common import GPU_POOL, OWNERS, blocking_checks, check_result
from apsft_dagster.core.base_model import base_model_path
from apsft_dagster.core.layout import TASK_CATALOG, merged_dir, merged_report, probe_report
from apsft_dagster.core.policy_checks import merge_problems, probe_problems
from apsft_dagster.core.stage_b import planned
from apsft_dagster.core.store import completed, json_bytes, sha256_bytes
from apsft_dagster.core.training.deploy import merge_policy
from apsft_dagster.core.training.probe import compare, greedy_outputs, probe_prompts
from apsft_dagster.experiment.assets.training import adapters, replication_adapters
from apsft_dagster.experiment.partitions import policy_partitions, replication_partitions
from apsft_dagster.resources import ExperimentResource, GenerationResource

MERGE_CHECKS = {
    "merge_pairs": "exactly one changed base weight per LoRA pair, every other tensor bit-identical to the base files",
    "deployment_probe": "each merged model's greedy output differs from base on at least one probe prompt",
}


@dg.asset(pool=GPU_POOL, partitions_def=policy_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
          deps=[adapters], group_name="training", kinds={"pytorch", "safetensors"}, owners=OWNERS,
          check_specs=blocking_checks("merged_models", MERGE_CHECKS))
def merged_models(context: dg.AssetExecutionContext, experiment: ExperimentResource, generator: GenerationResource):
    """Each Stage A policy's adapter merged into the base and fingerprinted, then probed against base."""
    yield from merge_and_probe(context, experiment, generator)


@dg.asset(pool=GPU_POOL, partitions_def=replication_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
          deps=[replication_adapters], group_name="training", kinds={"pytorch", "safetensors"}, owners=OWNERS,
          check_specs=blocking_checks("replication_merged_models", MERGE_CHECKS))
def replication_merged_models(context: dg.AssetExecutionContext, experiment: ExperimentResource,
                              generator: GenerationResource):
    """Each replication adapter merged, fingerprinted and probed, as `merged_models` does."""
    planned(experiment.store(), context.partition_keys, "replication_policies")
    yield from merge_and_probe(context, experiment, generator)


def merge_and_probe(context: dg.AssetExecutionContext, experiment: ExperimentResource, generator: GenerationResource):
    """Merge (or keep) each of the run's policies and probe it (or keep its probe), then the two checks.
    On a Ray cluster each policy's merge and probe go to an engine worker (workers/ray_pool.py)."""
    store = experiment.store()
    work, prompts = _merger(experiment, generator)
    todo = [p for p in context.partition_keys
            if not completed(store, merged_report(p), merged_dir(p)) or not store.exists(probe_report(p))]
    share = workers.share(context.asset_key.to_user_string(), merge_worker, experiment, generator,
                          second_core=False).expect(todo).open()  # smoke's six merges take 5 s: no helper pays
    reports, probes = {}, {}
    for i, policy in enumerate(context.partition_keys):
        got = share.result(policy) or work(policy)
        reports[policy], probes[policy], action, probed = got["report"], got["probe"], got["action"], got["probed"]
        context.add_asset_metadata({**_metadata(reports[policy], probes[policy], action), **share.placed(policy)},
                                   partition_key=policy)
        context.log.info(f"[{i + 1}/{len(context.partition_keys)}] {policy}: {action}, {probed}, "
                         f"{reports[policy]['changed_tensors']} weights changed, probe differs on "
                         f"{probes[policy]['differing']}/{len(prompts)} prompts")
    generator.release()
    digest = sha256_bytes(json_bytes({p: r["fingerprint"] for p, r in reports.items()}))
    yield dg.MaterializeResult(metadata={"policies": len(reports), "probe_prompts": len(prompts)},
                               data_version=dg.DataVersion(digest))
    yield check_result("merge_pairs", merge_problems(reports))
    yield check_result("deployment_probe", probe_problems(probes))


def _merger(experiment: ExperimentResource, generator: GenerationResource):
    """(work(policy) -> {"report", "probe", "action", "probed"}, the probe prompts): one policy merged
    (or kept) and probed (or its probe kept); the base's greedy outputs computed once, when first needed."""
    config, store = experiment.config(), experiment.store()
    base = str(base_model_path(config, store))
    prompts = probe_prompts(config, set(store.get_parquet(TASK_CATALOG)["prompt"]))
    key = {"max_new_tokens": config.probe.max_new_tokens, "prompts_sha256": sha256_bytes(json_bytes(prompts))}
    base_out: list[list[int]] = []

    def work(policy: str) -> dict:
        if completed(store, merged_report(policy), merged_dir(policy)):
            report, action = store.get_json(merged_report(policy)), "kept"
        else:
            generator.release()  # the merge needs the memory, not the engine
            report, action = merge_policy(store, config, policy, base), "merged"
        probe_key = {"policy": policy, "merged_fingerprint": report["fingerprint"], **key}
        probe = _kept_probe(store, policy, probe_key) if action == "kept" else None
        probed = "probe kept" if probe is not None else "probed"
        if probe is None:
            base_out[:] = base_out or greedy_outputs(generator.engine(), prompts, config.probe.max_new_tokens)
            engine = generator.engine(store.path(merged_dir(policy)))
            probe = compare(prompts, base_out, greedy_outputs(engine, prompts, config.probe.max_new_tokens),
                            engine.tokenizer.decode)
            store.put_json(probe_report(policy), {**probe_key, **probe})
        return {"report": report, "probe": probe, "action": action, "probed": probed}
    return work, prompts


def merge_worker(experiment: ExperimentResource):
    """An engine worker's share of the merges and probes (workers/ray_pool.py): one policy's."""
    return _merger(experiment, GenerationResource(experiment=experiment))[0]


def _kept_probe(store, policy: str, probe_key: dict) -> dict | None:
    """The stored probe of a kept merged model when it probed these bytes with these prompts and
    this allowance (then probing again would give the same tokens); None when it must run."""
    if not store.exists(probe_report(policy)):
        return None
    stored = store.get_json(probe_report(policy))  # verified against its receipt
    if any(stored.get(k) != v for k, v in probe_key.items()):
        return None
    return {k: v for k, v in stored.items() if k not in probe_key}


def _metadata(report: dict, probe: dict, action: str) -> dict:
    first = probe["first_difference"]
    shown = "none: identical to base on every probe prompt" if first is None else (
        f"**prompt**\n\n{first['prompt']}\n\n**base**\n\n```\n{first['base']}\n```\n\n"
        f"**merged**\n\n```\n{first['merged']}\n```")
    return {"action": action, "lora_pairs": report["lora_pairs"], "changed_tensors": report["changed_tensors"],
            "unchanged_tensors": report["unchanged_tensors"], "fingerprint": report["fingerprint"],
            "merge_weights": report["merge_weights"], "probe_differing": probe["differing"],
            "probe_prompts": probe["prompts"], "first_differing_pair": dg.MetadataValue.md(shown)}
