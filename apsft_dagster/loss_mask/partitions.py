"""The loss-mask curation's partitions: one per registered dataset version (`apsft loss-mask add NAME PATH`)."""

import dagster as dg

LM_DATASET = "lm_dataset"
lm_dataset_partitions = dg.DynamicPartitionsDefinition(name=LM_DATASET)
