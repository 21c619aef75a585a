"""The pure domain: tasks, protocol, store, config, models. Nothing below imports Dagster."""
