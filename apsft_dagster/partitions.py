"""Partitions derived from the definitions' config once: train task ids, sorted so each cell is contiguous."""

from __future__ import annotations

import dagster as dg

from apsft_dagster.core.selection import ARMS
from apsft_dagster.core.tasks.splits import train_task_ids
from apsft_dagster.core.training.policies import BASE, parse_policy, policy_keys, stage_a_eval_keys, stage_a_policies
from apsft_dagster.profile import definitions_config

train_task_partitions = dg.StaticPartitionsDefinition(train_task_ids(definitions_config()))
arm_partitions = dg.StaticPartitionsDefinition(list(ARMS))
# A policy is an arm at a training seed: Stage A's six first (one contiguous range), then the
# replication seed's, trained only when Stage B asks for them.
policy_partitions = dg.StaticPartitionsDefinition(policy_keys(definitions_config()))
STAGE_A_POLICIES = tuple(stage_a_policies(definitions_config()))
# Stage A evaluation: base, then the six Stage A policies.
stage_a_eval_partitions = dg.StaticPartitionsDefinition(stage_a_eval_keys(definitions_config()))
# Stage B evaluation: base and every policy; a triggered run evaluates those its plan names.
stage_b_eval_partitions = dg.StaticPartitionsDefinition([BASE, *policy_keys(definitions_config())])
# The loss-mask group: one partition per registered dataset version (`apsft loss-mask add NAME PATH`).
lm_dataset_partitions = dg.DynamicPartitionsDefinition(name="lm_dataset")
# The RL run report: one partition per registered run (the inbox sensor or `apsft rl-report add`).
rl_run_partitions = dg.DynamicPartitionsDefinition(name="rl_run")
# Each policy's adapter depends on its own arm's SFT file only.
arm_to_policies = dg.StaticPartitionMapping(
    {arm: [p for p in policy_keys(definitions_config()) if parse_policy(p)[0] == arm] for arm in ARMS})


def single_run_tags(keys: list[str]) -> dict[str, str]:
    """Run tags that make one run cover the key range first..last (a single-run backfill)."""
    return {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
