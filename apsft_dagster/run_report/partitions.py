"""The RL run report's partitions: one per registered run (the inbox sensor or `apsft rl-report add`)."""

import dagster as dg

RL_RUN = "rl_run"
rl_run_partitions = dg.DynamicPartitionsDefinition(name=RL_RUN)
