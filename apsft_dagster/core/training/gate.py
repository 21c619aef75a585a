"""What must hold before the first optimizer step: the seal, the manifest, and the budget.

`verified_manifest` refuses unless the evidence seal verifies, the manifest's receipt verifies,
the manifest names the current seal, and every arm file matches the manifest's SHA-256.

The budget gate (docs/PROTOCOL.md §10): device-hours of the training matrix = its forward tokens
(the manifest's, per arm, times the policies asked for) / tokens per second, measured on a short
warm-up (or the envelope's low end when none is run), compared with `training.budget_device_hours`
or with the budget named by the latest dated amendment recorded after this selection's manifest
(`apsft amend --budget-device-hours H "why"`). Over budget, training fails with the estimate, the
budget and the per-arm breakdown.
"""

from __future__ import annotations

import json

from apsft_dagster.core import amendments
from apsft_dagster.core.config import Config
from apsft_dagster.core.errors import BudgetError, TrainingError
from apsft_dagster.core.layout import EVIDENCE_SEAL, SFT_MANIFEST, arm_file
from apsft_dagster.core.policies import parse_policy
from apsft_dagster.core.seal import verify_seal
from apsft_dagster.core.store import Store


def verified_manifest(store: Store, config: Config) -> tuple[dict, str, str]:
    """(manifest, its SHA-256, the seal's SHA-256) once everything training reads verifies."""
    verify_seal(store, config)
    seal_sha = store.verify(EVIDENCE_SEAL)
    data, manifest_sha = store.read(SFT_MANIFEST)
    manifest = json.loads(data)
    if manifest["evidence_seal_sha256"] != seal_sha:
        raise TrainingError(f"{store.path(SFT_MANIFEST)} names seal {manifest['evidence_seal_sha256']}, the "
                            f"current seal is {seal_sha}; rematerialize sft_arms and sft_manifest "
                            "(apsft run --from sft_arms_job)")
    if manifest["config_digest"] != config.sealed_digest:
        raise TrainingError(f"{store.path(SFT_MANIFEST)} was built under config {manifest['config_digest']}, this run "
                            f"is {config.sealed_digest}; rematerialize it (apsft run --from sft_arms_job)")
    for entry in manifest["arms"]:
        digest = store.verify(arm_file(entry["arm"]))
        if digest != entry["sha256"]:
            raise TrainingError(f"{store.path(arm_file(entry['arm']))}: SHA-256 {digest}, the manifest says "
                                f"{entry['sha256']}; rematerialize sft_arms and sft_manifest")
    return manifest, manifest_sha, seal_sha


def budget_amendment(store: Store, manifest: dict) -> dict | None:
    """The latest amendment naming a budget, recorded while this selection's manifest existed."""
    identity = amendments.selection_identity(manifest)
    named = [r for r in amendments.classified(store) if r.get("budget_device_hours") is not None]
    valid = [r for r in named if (r.get("selection") or {}).get("identity") == identity]
    return valid[-1] if valid else None


def estimate(manifest: dict, policies: list[str], tokens_per_s: float) -> dict:
    """Device-hours per policy and in all: each policy's arm's forward tokens / throughput."""
    by_arm = {e["arm"]: e["forward_tokens"] for e in manifest["arms"]}
    tokens = {p: by_arm[parse_policy(p)[0]] for p in policies}
    per_policy = {p: n / tokens_per_s / 3600 for p, n in tokens.items()}
    return {"tokens_per_s": tokens_per_s, "forward_tokens": sum(tokens.values()), "per_policy": per_policy,
            "device_hours": sum(per_policy.values())}


def budget_gate(store: Store, config: Config, manifest: dict, policies: list[str], tokens_per_s: float,
                measured: bool) -> dict:
    """The gate's record (estimate, budget, its source); BudgetError when over budget."""
    est = estimate(manifest, policies, tokens_per_s)
    amendment = budget_amendment(store, manifest)
    budget = amendment["budget_device_hours"] if amendment else config.training.budget_device_hours
    source = (f"amendment {amendment['seq']} of {amendment['date']}: {amendment['text']}" if amendment
              else "config training.budget_device_hours")
    record = {**est, "throughput_source": "measured warm-up" if measured else "config envelope (low)",
              "budget_device_hours": budget, "budget_source": source, "within_budget": est["device_hours"] <= budget,
              "amendment_seq": amendment["seq"] if amendment else None}
    if not record["within_budget"]:
        rows = "\n".join(f"  {p}: {h:.4f} device-hours" for p, h in est["per_policy"].items())
        raise BudgetError(
            f"training matrix estimated at {est['device_hours']:.4f} device-hours ({est['forward_tokens']:,} forward "
            f"tokens at {tokens_per_s:,.0f} tokens/s, {record['throughput_source']}) exceeds the budget of "
            f"{budget} device-hours ({source}); nothing was trained.\n{rows}\nTo raise the budget, record a dated "
            "amendment after this manifest: apsft amend --budget-device-hours H \"why\", then reseal and rerun "
            "(apsft run --from evidence_seal_job)")
    return record
