"""Merge one policy into the store and keep its receipt; release weights when asked to.

The merge receipt (`merged_models/<policy>.json`, written last) records the adapter it merged,
which base weights the merge used, the pair counts proven by `merge_snapshot`, and every deployed
file's SHA-256. With `merge.keep_weights: false` the weights can be released after evaluation:
the directory goes, the receipt and its fingerprints stay.
"""

from __future__ import annotations

from apsft_dagster.core.config import Config
from apsft_dagster.core.errors import MergeError
from apsft_dagster.core.layout import adapter_dir, adapter_report, merged_dir, merged_report
from apsft_dagster.core.store import Store
from apsft_dagster.core.training.merge import merge_snapshot

FORMAT = "apsft-merged-model/2"  # 2: the snapshot's own files and names (merge_snapshot)
MERGE_DEVICE = "cpu"  # merged off the accelerator: no contention with a resident engine, one rounding path
MERGE_DTYPE = "float32"  # W + BA in float32 whatever the snapshot's dtype, then rounded once to it


def merge_policy(store: Store, config: Config, policy: str, base_path: str) -> dict:
    adapter = store.get_json(adapter_report(policy))
    adapter_sha = store.verify(adapter_dir(policy))
    counts: dict = {}

    def merge(out_dir) -> None:
        counts.update(merge_snapshot(base_path, store.path(adapter_dir(policy)), out_dir, dtype=MERGE_DTYPE,
                                     device=MERGE_DEVICE))
        if counts["lora_pairs"] != adapter["lora_pairs"]:
            raise MergeError(f"{policy}: the adapter holds {counts['lora_pairs']} LoRA pairs, training recorded "
                             f"{adapter['lora_pairs']}")

    store.remove(merged_report(policy))
    fingerprint = store.put_dir(merged_dir(policy), merge)
    report = {"format": FORMAT, "policy": policy, "adapter_files_sha256": adapter_sha,
              "adapter_trained_on": adapter["base_weights"],
              "merge_weights": f"the base snapshot's own tensors (never the 4-bit base), W + BA computed in "
                               f"{MERGE_DTYPE} on {MERGE_DEVICE}, stored in each tensor's dtype",
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
