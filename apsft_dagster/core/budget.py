"""The whole training matrix a run may need, priced at Stage A's budget gate (docs/PROTOCOL.md §10).

The gate (`core/training/gate.py`) prices the policies a run trains: Stage A's six, then, in
Stage B, the six with the replication seed's pair, which Stage A's decision names. At Stage A's
gate that pair is not known yet, so the gate's record gains Stage B's outlook: Stage A's matrix
with the costliest pair Stage A could lead to (`core/stage_b.py` `possible_plans`: each potential
arm as the winner, each baseline as its strongest baseline, by the manifest's forward tokens), at
the throughput the gate measured and against the budget it applied. Stage B can trigger under
every valid profile (`stage_b.min_gain` <= 1 and `min_lower_bound` < 1 are the config's bounds),
so the pair is always priced.

When Stage B would not fit, Stage A still trains (its own matrix passed the gate, and a Stage A
that does not trigger is final) and the gate says so before the first optimizer step, with the
figure an amendment must reach: the budget can then be raised before Stage A's decision is seen,
where otherwise `replication_adapters` would stop at its gate after Stage A's whole run.
"""

from __future__ import annotations

from apsft_dagster.core.config import Config
from apsft_dagster.core.policies import parse_policy, stage_a_policies
from apsft_dagster.core.stage_b import possible_plans
from apsft_dagster.core.training.gate import estimate


def costliest_pair(manifest: dict, config: Config) -> list[str]:
    """The replication policies of the plan Stage A could lead to whose forward tokens are the most
    (ties: the first in `possible_plans`' order)."""
    by_arm = {e["arm"]: e["forward_tokens"] for e in manifest["arms"]}
    pairs = [p["replication_policies"] for p in possible_plans(config.seeds.replication, config.seeds.experiment)]
    return max(pairs, key=lambda pair: sum(by_arm[parse_policy(p)[0]] for p in pair))


def stage_b_outlook(manifest: dict, config: Config, matrix: list[str], gate: dict) -> dict | None:
    """Whether Stage B's training would fit after Stage A's (`gate`: the record Stage A's gate wrote
    for `matrix`); None where the matrix already holds replication policies (Stage B's own gate)."""
    if set(matrix) - set(stage_a_policies(config)):
        return None
    pair = costliest_pair(manifest, config)
    tokens_per_s, budget = gate["tokens_per_s"], gate["budget_device_hours"]
    est = estimate(manifest, [*matrix, *pair], tokens_per_s)
    fits = est["device_hours"] <= budget
    priced = (f"Stage A's matrix with the costliest replication pair Stage A could lead to ({', '.join(pair)}) is "
              f"{est['device_hours']:.4f} device-hours ({est['forward_tokens']:,} forward tokens at "
              f"{tokens_per_s:,.0f} tokens/s, {gate['throughput_source']})")
    if fits:
        message = (f"Stage B would fit: {priced}, within the budget of {budget} device-hours "
                   f"({gate['budget_source']})")
    else:
        message = (f"Stage B would not fit: {priced}, over the budget of {budget} device-hours "
                   f"({gate['budget_source']}). Stage A trains: its own matrix, {gate['device_hours']:.4f} "
                   "device-hours, is within budget, and its verdict is final unless it triggers. If it triggers, "
                   "replication_adapters stops at this gate. To fund Stage B now, before Stage A's decision, record "
                   f"a dated amendment of at least {est['device_hours']:.4f} device-hours: apsft amend "
                   "--budget-device-hours H \"why\", then reseal and rerun (apsft run --from evidence_seal_job)")
    return {"priced_policies": pair, "forward_tokens": est["forward_tokens"], "device_hours": est["device_hours"],
            "budget_device_hours": budget, "within_budget": fits, "message": message}
