"""The rules around training a policy (training itself is `core/training/`, which the seal binds):
which policies the budget gate prices, and the checks of what training, merging and the
deployment probe wrote."""

from __future__ import annotations

import math
from collections.abc import Sequence

from apsft_dagster.core.config import Training
from apsft_dagster.core.layout import adapter_dir
from apsft_dagster.core.store import Store
from apsft_dagster.core.training.lora import ADAPTER_WEIGHTS


def training_matrix(stage_a_policies: Sequence[str], asked: Sequence[str]) -> list[str]:
    """The policies the budget gate prices: Stage A's six always (the matrix the manifest budgets),
    then any other policy this run trains (the replication seed's)."""
    return list(stage_a_policies) + [p for p in asked if p not in stage_a_policies]


def adapter_problems(store: Store, reports: dict[str, dict], training: Training) -> dict[str, list[str]]:
    """The adapters' three checks: exact optimizer steps, one LoRA pair per projection in the file
    (counted in the safetensors file itself), and one initial adapter per seed."""
    from safetensors import safe_open

    steps, pairs, initial = [], [], {}
    for policy, r in reports.items():
        want = math.ceil(r["rows"] * training.epochs / training.grad_accum)
        if r["optimizer_steps"] != want or len(r["curve"]) != want:
            steps.append(f"{policy}: {r['optimizer_steps']} steps ({len(r['curve'])} curve points), expected {want}")
        with safe_open(str(store.path(adapter_dir(policy)) / ADAPTER_WEIGHTS), framework="pt") as fh:
            in_file = sum(1 for k in fh.keys() if ".lora_A." in k)
        if in_file != r["lora_pairs"]:
            pairs.append(f"{policy}: adapter file holds {in_file} LoRA pairs, training recorded {r['lora_pairs']}")
        initial.setdefault(r["seed"], {}).setdefault(r["initial_adapter_sha256"], []).append(policy)
    same = [f"seed {seed}: initial adapters differ: " + "; ".join(f"{d[:12]} {ps}" for d, ps in groups.items())
            for seed, groups in initial.items() if len(groups) > 1]
    return {"exact_optimizer_steps": steps, "lora_pairs": pairs, "same_initial_adapter": same}


def merge_problems(reports: dict[str, dict]) -> list[str]:
    """Every LoRA pair changed exactly its one base weight (`merge_pairs`)."""
    return [f"{p}: {r['changed_tensors']} weights changed, {r['lora_pairs']} pairs"
            for p, r in reports.items() if r["changed_tensors"] != r["lora_pairs"]]


def probe_problems(probes: dict[str, dict]) -> list[str]:
    """A merged model that answers exactly like base on every probe prompt is not deployed (`deployment_probe`)."""
    return [f"{p}: greedy output equals base on all {r['prompts']} probe prompts"
            for p, r in probes.items() if not r["passed"]]
