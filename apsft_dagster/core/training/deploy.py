"""Merge one policy into the store and keep its receipt; release weights when asked to.

The merge receipt (`merged_models/<policy>.json`, written last) records the adapter it merged,
which base weights the merge used, the pair counts proven by `verify_merge`, and every deployed
file's SHA-256. With `merge.keep_weights: false` the weights can be released after evaluation:
the directory goes, the receipt and its fingerprints stay.
"""

from __future__ import annotations

from apsft_dagster.core.config import Config
from apsft_dagster.core.layout import adapter_dir, adapter_report, merged_dir, merged_report
from apsft_dagster.core.store import Store
from apsft_dagster.core.training.merge import merge_adapter, save_merged, verify_merge

FORMAT = "apsft-merged-model/1"
MERGE_DEVICE = "cpu"  # merged off the accelerator: no contention with a resident engine, one rounding path


def merge_policy(store: Store, config: Config, policy: str, base_path: str) -> dict:
    adapter = store.get_json(adapter_report(policy))
    adapter_sha = store.verify(adapter_dir(policy))
    compute = config.compute.model_copy(update={"device": MERGE_DEVICE, "quantization": "none",
                                                "dtype": config.compute.dtype if config.compute.device == "cuda"
                                                else "float32"})
    merged, pairs = merge_adapter(base_path, str(store.path(adapter_dir(policy))), compute)
    counts = verify_merge(merged, pairs, adapter["lora_pairs"], base_path)
    store.remove(merged_report(policy))
    fingerprint = store.put_dir(merged_dir(policy), lambda d: save_merged(merged, base_path, d))
    report = {"format": FORMAT, "policy": policy, "adapter_files_sha256": adapter_sha,
              "adapter_trained_on": adapter["base_weights"],
              "merge_weights": f"{compute.dtype} base weights (never the 4-bit base), merged on {MERGE_DEVICE}",
              **counts, "fingerprint": fingerprint, "files": store.receipt(merged_dir(policy))["files"],
              "weights_kept": True}
    store.put_json(merged_report(policy), report)
    return report


def release_weights(store: Store, policy: str) -> dict:
    """`merge.keep_weights: false`, after evaluation: delete the merged weights, keep the receipt
    (its fingerprint and per-file SHA-256s) with `weights_kept: false`."""
    report = store.get_json(merged_report(policy))
    store.remove(merged_dir(policy))
    report = {**report, "weights_kept": False}
    store.put_json(merged_report(policy), report)
    return report
