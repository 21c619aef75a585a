"""Partitions derived from the config once: train task ids, sorted so each cell is contiguous."""

from __future__ import annotations

import dagster as dg

from apsft_dagster.core.config import load_config
from apsft_dagster.core.tasks.splits import train_task_ids

train_task_partitions = dg.StaticPartitionsDefinition(train_task_ids(load_config()))


def single_run_tags(keys: list[str]) -> dict[str, str]:
    """Run tags that make one run cover the key range first..last (a single-run backfill)."""
    return {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
