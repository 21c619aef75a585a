"""The experiment's partitions, derived from the definitions' config once: train task ids (sorted
so each cell is contiguous), arms, policies and the evaluations' policy lists.

A partition set lists what a run plans, so a finished run shows nothing missing: Stage A's six
policies are static; the replication seed's policies and Stage B's evaluations are dynamic, their
keys added when Stage B's plan names them (`stage_b_plan`, and the runner before it runs them)."""

from __future__ import annotations

import dagster as dg

from apsft_dagster.core.policies import BASE, parse_policy, replication_policies, stage_a_eval_keys, stage_a_policies
from apsft_dagster.core.selection.arms import ARMS
from apsft_dagster.core.task_file.source import train_task_ids
from apsft_dagster.profile import definitions_config

REPLICATION_POLICIES, STAGE_B_POLICIES = "replication_policies", "stage_b_policies"

train_task_partitions = dg.StaticPartitionsDefinition(train_task_ids(definitions_config()))
arm_partitions = dg.StaticPartitionsDefinition(list(ARMS))
STAGE_A_POLICIES = tuple(stage_a_policies(definitions_config()))
# A policy is an arm at a training seed: Stage A trains each arm at the experiment seed.
policy_partitions = dg.StaticPartitionsDefinition(list(STAGE_A_POLICIES))
# The replication seed's policies Stage B's plan names (none unless Stage A triggers).
replication_partitions = dg.DynamicPartitionsDefinition(name=REPLICATION_POLICIES)
REPLICATION_KEYS = tuple(replication_policies(definitions_config()))  # the keys it may hold
# Stage A evaluation: base, then the six Stage A policies.
stage_a_eval_partitions = dg.StaticPartitionsDefinition(stage_a_eval_keys(definitions_config()))
# Stage B evaluation: the policies its plan evaluates (base and any policy, of either seed).
stage_b_partitions = dg.DynamicPartitionsDefinition(name=STAGE_B_POLICIES)
STAGE_B_KEYS = (BASE, *STAGE_A_POLICIES, *REPLICATION_KEYS)
# Each policy's adapter depends on its own arm's SFT file only.
arm_to_policies = dg.StaticPartitionMapping({arm: [p for p in STAGE_A_POLICIES if parse_policy(p)[0] == arm]
                                             for arm in ARMS})
# Evaluation reads each policy's merged model (base has none): partition key = policy key.
merged_to_eval = dg.StaticPartitionMapping({p: p for p in STAGE_A_POLICIES})
