"""What every wing's assets share: helpers (common.py) and the SQL-audit assets (audits.py). The stage
modules live in their wings (experiment/assets/: one per stage, named in the experiment's own words)."""

import warnings

# Single-run backfills (BackfillPolicy.single_run) are marked beta in dagster 1.13; every
# task-partitioned bank relies on them on purpose, so the warning says nothing new.
warnings.filterwarnings("ignore", message="Parameter `backfill_policy` of function `asset` is currently in beta")
