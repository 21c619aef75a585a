"""Partitions derived from the definitions' config once: train task ids, sorted so each cell is contiguous."""

from __future__ import annotations

import dagster as dg

from apsft_dagster.core.selection import ARMS
from apsft_dagster.core.tasks.splits import train_task_ids
from apsft_dagster.profile import definitions_config

train_task_partitions = dg.StaticPartitionsDefinition(train_task_ids(definitions_config()))
arm_partitions = dg.StaticPartitionsDefinition(list(ARMS))


def single_run_tags(keys: list[str]) -> dict[str, str]:
    """Run tags that make one run cover the key range first..last (a single-run backfill)."""
    return {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
