"""The RL run report's store names and SQL views (the experiment's are in core/layout.py)."""

GROUP = "run_report"  # the wing's asset group

# one folder per registered run
RUN_REPORT = "run_report"


def rl_file(run: str, name: str) -> str:
    """`source.json` (the registration), `evidence.json` (tables, rates, pairs, verdict),
    `samples.parquet` (each rollout sample's signals), `report.md`, `<plot>.png`."""
    return f"{RUN_REPORT}/{run}/{name}"


# view -> (the asset that writes its files, the files, the view's SELECT over `{files}`): every
# registered run's rollout samples with their hack signals
VIEWS = {"rl_samples": ("rl_run_evidence", rl_file("*", "samples.parquet"), "select * from read_parquet({files})")}
