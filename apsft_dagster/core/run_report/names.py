"""The RL run report's store names and SQL views (the experiment's are in core/layout.py)."""

GROUP = "run_report"  # the wing's asset group

# one folder per registered run
RUN_REPORT = "run_report"


def rl_file(run: str, name: str) -> str:
    """`source.json` (the registration), `evidence.json` (tables, rates, pairs, verdict),
    `samples.parquet` (each rollout sample's signals), `report.md`, `<plot>.png`; `filtered.jsonl` and
    `filter.json` (`apsft rl-report filter`: the unflagged rollouts and the counts dropped)."""
    return f"{RUN_REPORT}/{run}/{name}"


SAMPLES = rl_file("*", "samples.parquet")
# the per-sample table's own columns (core/run_report/samples.py); each other column is one selected signal's
_OWN = "run, step, sample, problem_id, reward, words, hacked"
# view -> (the asset that writes its files, the files, the view's SELECT over `{files}`): every registered
# run's rollout samples with their hack signals (runs may select different signals: a signal a run did not
# select is null there), and the same long: one row per (run, step, sample, selected signal)
VIEWS = {
    "rl_samples": ("rl_run_evidence", SAMPLES, "select * from read_parquet({files}, union_by_name = true)"),
    "rl_sample_signals": ("rl_run_evidence", SAMPLES,
                          f"select run, step, sample, problem_id, signal, fired from (unpivot (select * from "
                          f"read_parquet({{files}}, union_by_name = true)) on columns(* exclude ({_OWN})) "
                          "into name signal value fired)"),
}
