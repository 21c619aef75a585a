"""The loss-mask curation wing: its assets, partitions, stages, CLI command and definitions
(the pure work is in `core/loss_mask/`, its settings in `core/config/sections/loss_mask.py`)."""
