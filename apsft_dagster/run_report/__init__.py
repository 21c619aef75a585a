"""The RL run report wing: its assets, partitions, stages, inbox sensor, CLI command and
definitions (the pure work is in `core/run_report/`, its settings in `core/config/sections/run_report.py`)."""
