"""The experiment's partitions, derived from the definitions' config once: train task ids (sorted
so each cell is contiguous), arms, policies and the evaluations' policy lists."""

from __future__ import annotations

import dagster as dg

from apsft_dagster.core.arms import ARMS
from apsft_dagster.core.tasks.splits import train_task_ids
from apsft_dagster.core.policies import BASE, parse_policy, policy_keys, stage_a_eval_keys, stage_a_policies
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
# Each policy's adapter depends on its own arm's SFT file only.
arm_to_policies = dg.StaticPartitionMapping(
    {arm: [p for p in policy_keys(definitions_config()) if parse_policy(p)[0] == arm] for arm in ARMS})

# Evaluation reads each policy's merged model; Stage B reuses Stage A's generations and evaluates
# every policy's merged model, base included where it applies (partition key = policy key).
merged_to_eval = dg.StaticPartitionMapping({p: p for p in STAGE_A_POLICIES})
merged_to_stage_b = dg.StaticPartitionMapping({p: p for p in policy_keys(definitions_config())})
stage_a_to_stage_b = dg.StaticPartitionMapping({p: p for p in stage_a_eval_partitions.get_partition_keys()})
