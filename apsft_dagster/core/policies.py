"""A policy is an arm trained at one seed: `<arm>-seed<seed>`, the partition key of adapters on.

Stage A trains every arm at the experiment seed (42); Stage B replicates at the replication seed
(43) only what it asks for. Keys are ordered Stage A first, so Stage A is one contiguous range.
"""

from __future__ import annotations

from apsft_dagster.core.config import Config
from apsft_dagster.core.errors import TrainingError
from apsft_dagster.core.selection.arms import ARMS


def policy_key(arm: str, seed: int) -> str:
    return f"{arm}-seed{seed}"


def parse_policy(key: str) -> tuple[str, int]:
    """(arm, seed) of a policy key; TrainingError naming the key otherwise."""
    arm, sep, seed = key.rpartition("-seed")
    if not sep or arm not in ARMS or not seed.isdigit():
        raise TrainingError(f"policy {key!r}: expected <arm>-seed<N> with an arm among {list(ARMS)}")
    return arm, int(seed)


def stage_a_policies(config: Config) -> list[str]:
    return [policy_key(arm, config.seeds.experiment) for arm in ARMS]


def replication_policies(config: Config) -> list[str]:
    return [policy_key(arm, config.seeds.replication) for arm in ARMS]


def policy_keys(config: Config) -> list[str]:
    return stage_a_policies(config) + replication_policies(config)


BASE = "base"  # the untrained base model, evaluated beside the policies


def arm_and_seed(key: str) -> tuple[str, int | None]:
    """(arm, training seed) of an evaluated policy; base is ("base", None)."""
    return (BASE, None) if key == BASE else parse_policy(key)


def stage_a_eval_keys(config: Config) -> list[str]:
    """What Stage A evaluates: base and the six Stage A policies."""
    return [BASE, *stage_a_policies(config)]
