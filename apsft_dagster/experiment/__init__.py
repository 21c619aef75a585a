"""The experiment wing: one asset module per stage (`assets/`), its partitions, stages, CLI
commands and definitions (the pure work is the rest of `core/`)."""
