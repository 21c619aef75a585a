"""SQL audits: dependencies parsed from SQL, and every smoke result against Polars/NumPy recomputation."""

import math
import re

import dagster as dg
import duckdb
import polars as pl
import pytest

from apsft_dagster.cli import main
from apsft_dagster.core.audits import AUDIT_DIR, discover, load_audit, referenced_tables, run_audit
from apsft_dagster.core.errors import AuditError
from apsft_dagster.core.layout import AUDIT_DATABASE, TASK_CATALOG, TRACE_BANK, arm_rows, shard_file
from apsft_dagster.core.selection.arms import ARMS
from apsft_dagster.core.store import Store
from apsft_dagster.experiment.stages import STAGES

EXEMPT = "exempt (success_rft)"


def expected_cell_balance(catalog: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    """arm_cell_balance recomputed in Polars: every arm x train cell, empty cells included."""
    cells = catalog.filter(pl.col("split") == "train").group_by("family", "level").agg(pl.len().alias("catalog_tasks"))
    counts = rows.group_by("arm", "family", "level").agg(pl.col("task_id").n_unique().alias("tasks"),
                                                        pl.len().alias("rows"))
    grid = (rows.select("arm").unique().join(cells, how="cross")
            .join(counts, on=["arm", "family", "level"], how="left")
            .with_columns(pl.col("tasks", "rows").fill_null(0)))
    full = (pl.col("tasks") == pl.col("catalog_tasks")) & (pl.col("rows") == 2 * pl.col("catalog_tasks"))
    status = (pl.when(full).then(pl.lit("balanced"))
              .when(pl.col("arm") == "success_rft").then(pl.lit(EXEMPT)).otherwise(pl.lit("UNBALANCED")))
    return (grid.with_columns(full.alias("balanced"), status.alias("status"))
            .select("arm", "family", "level", "catalog_tasks", "tasks", "rows", "balanced", "status")
            .sort("arm", "family", "level"))


def test_tables_come_from_the_parser_without_ctes():
    sql = """with t as (select * from sft_rows), u as (select 1 from t)
             select * from t join score_bank using (trace_id)
             where exists (select 1 from r1_labels where r1_labels.trace_id = t.trace_id) and 1 in (select * from u)"""
    assert referenced_tables(sql) == ("r1_labels", "score_bank", "sft_rows")
    assert referenced_tables("select 'from trace_bank' as s from task_catalog -- from score_bank") == ("task_catalog",)


def test_bad_audit_files_are_refused_naming_the_file(tmp_path):
    two = tmp_path / "two.sql"
    two.write_text("select 1; select 2")
    with pytest.raises(AuditError, match="two.sql: holds 2 statements"):
        load_audit(two)
    unknown = tmp_path / "unknown.sql"
    unknown.write_text("select * from trace_bank join traces using (trace_id)")
    with pytest.raises(AuditError, match=r"unknown.sql: reads \['traces'\], which are not views"):
        load_audit(unknown)
    broken = tmp_path / "broken.sql"
    broken.write_text("selec * form trace_bank")
    with pytest.raises(AuditError, match="broken.sql: DuckDB cannot parse it"):
        load_audit(broken)


def test_asset_dependencies_follow_the_sql():
    from apsft_dagster.definitions import defs

    graph = defs.resolve_asset_graph()
    audits = {a.name: a for a in discover()}
    assert {"selection_mode_counts", "fallback_gaps", "arm_cell_balance", "success_support", "arm_dose",
            "harvest_funnel", "parity_residuals"} <= set(audits)
    parents = graph.get(dg.AssetKey("audit_success_support")).parent_keys
    assert {k.to_user_string() for k in parents} == {"r1_labels_index", "sft_arms"}
    parents = graph.get(dg.AssetKey("audit_arm_cell_balance")).parent_keys
    assert {k.to_user_string() for k in parents} == {"sft_arms", "task_catalog"}


@pytest.fixture(scope="module")
def audited(smoke_run):
    _, store = smoke_run
    rows = pl.concat([store.get_parquet(arm_rows(a)) for a in ARMS], how="diagonal_relaxed")
    experiment = {a.key.to_user_string() for stage in STAGES for a in stage.assets}
    return store, {a.name: run_audit(a, store) for a in discover() if set(a.assets) <= experiment}, rows


def test_mode_counts_match_polars(audited):
    _, results, rows = audited
    expected = rows.group_by("arm", "mode").len("rows").sort("arm", "mode")
    assert results["selection_mode_counts"].rows() == expected.rows()


def test_cell_balance_reports_short_success_cells_as_exempt_not_balanced(audited):
    store, results, rows = audited
    balance = results["arm_cell_balance"]
    expected = expected_cell_balance(store.get_parquet(TASK_CATALOG), rows)
    assert balance.columns == expected.columns
    assert balance.rows() == expected.rows()
    assert balance.height == len(ARMS) * 9  # every arm x every train cell, empty ones included
    assert (balance.filter(pl.col("arm") != "success_rft")["status"] == "balanced").all()
    success = balance.filter(pl.col("arm") == "success_rft")
    short = success.filter((pl.col("tasks") < pl.col("catalog_tasks"))
                           | (pl.col("rows") != 2 * pl.col("catalog_tasks")))
    assert not short["balanced"].any() and (short["status"] == EXEMPT).all()


def test_cell_balance_on_a_constructed_store(tmp_path):
    """Short success_rft cells (one partly filled, one empty) are exempt; a short other arm is UNBALANCED."""
    catalog = pl.DataFrame({"task_id": ["c1a", "c1b", "c2a", "c2b", "e1"], "split": ["train"] * 4 + ["core_iid"],
                            "family": ["caravan"] * 5, "level": [1, 1, 2, 2, 1]})
    catalog.write_parquet(tmp_path / "task_catalog.parquet")
    (tmp_path / "sft_arms").mkdir()
    arms = {"answer_potential": ["c1a", "c1a", "c1b", "c1b", "c2a", "c2a"],  # cell 2 misses c2b
            "shortest_natural": ["c1a", "c1a", "c1b", "c1b", "c2a", "c2a", "c2b", "c2b"],
            "success_rft": ["c1a"] * 4}  # two rows per cell task by count, but one task; cell 2 empty
    for arm, tasks in arms.items():
        level = [int(t[1]) for t in tasks]
        pl.DataFrame({"arm": arm, "task_id": tasks, "family": "caravan", "level": level}).write_parquet(
            tmp_path / "sft_arms" / f"{arm}.rows.parquet")
    store = Store(tmp_path)
    got = run_audit(load_audit(AUDIT_DIR / "arm_cell_balance.sql"), store)
    rows = pl.concat([pl.read_parquet(p) for p in sorted((tmp_path / "sft_arms").glob("*.parquet"))])
    assert got.rows() == expected_cell_balance(catalog, rows).rows()
    status = {(a, lv): (t, n, b, s) for a, _, lv, _, t, n, b, s in got.iter_rows()}
    assert status == {("answer_potential", 1): (2, 4, True, "balanced"),
                      ("answer_potential", 2): (1, 2, False, "UNBALANCED"),
                      ("shortest_natural", 1): (2, 4, True, "balanced"),
                      ("shortest_natural", 2): (2, 4, True, "balanced"),
                      ("success_rft", 1): (1, 4, False, EXEMPT),
                      ("success_rft", 2): (0, 0, False, EXEMPT)}


def test_fallback_gaps_use_the_order_statistic(audited):
    _, results, rows = audited
    for arm, mode, n, median, mean, p90, top in results["fallback_gaps"].iter_rows():
        gaps = sorted(rows.filter((pl.col("arm") == arm) & (pl.col("mode") == mode))["gap"].to_list())
        assert n == len(gaps) and max(gaps) == top
        assert p90 == gaps[math.ceil(0.9 * len(gaps)) - 1]  # the k-th smallest, k = ceil(0.9 n)
        assert mean == pytest.approx(sum(gaps) / len(gaps))
        mid = len(gaps) // 2
        assert median == pytest.approx(gaps[mid] if len(gaps) % 2 else (gaps[mid - 1] + gaps[mid]) / 2)
    assert set(results["fallback_gaps"]["arm"]) <= {"answer_potential", "joint_potential"}


def test_funnel_support_dose_and_parity_match_the_artifacts(audited):
    store, results, rows = audited
    tasks = sorted(store.get_json(f"{TRACE_BANK}/index.json")["tasks"])
    bank = pl.concat([store.get_parquet(shard_file(TRACE_BANK, t)) for t in tasks])
    funnel = results["harvest_funnel"]
    assert funnel["traces"].sum() == bank.height and funnel["eligible"].sum() == bank["eligible"].sum()
    assert funnel["continuations"].sum() == bank["continued"].sum() and funnel["closes"].sum() == bank["closed"].sum()
    success = rows.filter(pl.col("arm") == "success_rft")
    support = results["success_support"].row(0, named=True)
    assert support["unique_sources"] == success["source_trace_id"].n_unique()
    assert support["repeat_rows"] == success.filter(pl.col("mode") == "repeat").height
    labels = pl.concat([store.get_parquet(shard_file("r1_labels", t)) for t in tasks])
    assert support["successful_traces_in_bank"] == labels["success"].sum()
    manifest = {e["arm"]: e for e in store.get_json("sft_manifest.json")["arms"]}
    for arm, n, thought, forward, *_ in results["arm_dose"].iter_rows():
        assert (n, thought, forward) == (manifest[arm]["rows"], manifest[arm]["thought_tokens"],
                                         manifest[arm]["forward_tokens"])
    parity = store.get_json("parity_gate.json")
    assert {m: v for m, v, *_ in results["parity_residuals"].iter_rows()} == parity["metrics"]
    assert {m: v for m, _, v, *_ in results["parity_residuals"].iter_rows()} == parity["means"]


def test_cli_prints_an_audit_and_keeps_it_in_duckdb(audited, capsys):
    store, results, _ = audited
    assert main(["audit", "selection_mode_counts", "--store", str(store.root)]) == 0
    out = capsys.readouterr().out
    assert "== selection_mode_counts" in out and "answer_potential" in out
    con = duckdb.connect(str(store.path(AUDIT_DATABASE)), read_only=True)
    stored = con.execute("select * from selection_mode_counts order by arm, mode").fetchall()
    con.close()
    assert stored == results["selection_mode_counts"].rows()
    assert main(["audit", "no_such_audit", "--store", str(store.root)]) == 2
    assert "known: arm_cell_balance" in capsys.readouterr().err


def test_cli_runs_every_audit_and_skips_those_whose_inputs_are_not_there(audited, tmp_path, capsys):
    """The experiment's store has no loss-mask census: `apsft audit` says so for those audits and
    runs the rest; asked for by name, the missing input is an error naming the asset to run."""
    import shutil

    store, _, _ = audited
    copy = tmp_path / "store"
    shutil.copytree(store.root, copy)
    assert main(["audit", "--store", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "== lm_reasons_by_source: skipped" in out and "materialize `lm_census` first" in out
    assert "== arm_dose (arm_dose.sql, " in out and re.search(r"\n\d+ audits in \d+\.\d\d s \(run, printed", out)
    assert main(["audit", "lm_reason_combinations", "--store", str(copy)]) == 2
    assert "materialize `lm_census` first" in capsys.readouterr().err


def _audit_file(tmp_path, name: str, sql: str):
    path = tmp_path / f"{name}.sql"
    path.write_text(sql)
    return load_audit(path)


def test_an_audit_over_evaluation_runs_after_evaluation(audited, tmp_path):
    """A throwaway audit over stage_a_eval joins the first audit-hosting stage after stage_a_eval_job
    (not sft_manifest_and_audits_job, where its inputs would not exist yet) and runs there."""
    from apsft_dagster.assets.audits import place_audits
    from apsft_dagster.experiment.stages import PLAN
    from apsft_dagster.runner import run_stages
    from apsft_dagster.stage import stage_assets, stage_jobs
    from conftest import smoke_resources

    store, _, _ = audited
    audit = _audit_file(tmp_path, "eval_accuracy", "-- accuracy per policy and split\n"
                        "select policy, split, avg(correct::int) as accuracy, count(*) as tasks from stage_a_eval "
                        "group by policy, split order by policy, split")
    assert audit.assets == ["stage_a_eval"]
    stages = place_audits(PLAN, [audit])
    jobs = [s.job for s in stages]
    [host] = [s.job for s in stages if "audit_eval_accuracy" in {a.key.to_user_string() for a in s.assets}]
    assert host == "stage_a_analysis_job" and jobs.index(host) > jobs.index("stage_a_eval_job")
    copy = Store(tmp_path / "store")
    import shutil

    shutil.copytree(store.root, copy.root)
    chosen = [s for s in stages if s.job in ("stage_a_eval_job", host)]
    defs = dg.Definitions(assets=stage_assets(stages), jobs=stage_jobs(chosen), resources=smoke_resources(copy.root))
    outcomes = run_stages(defs, dg.DagsterInstance.ephemeral(), chosen, alert=False)
    assert [o.job for o in outcomes] == ["stage_a_eval_job", host] and all(o.ok for o in outcomes), outcomes
    assert outcomes[1].materialized["audit_eval_accuracy"] == 1
    result = run_audit(audit, copy)
    tables = pl.concat([copy.get_parquet(f"stage_a_eval/{p}.parquet") for p in result["policy"].unique().sort()])
    expected = (tables.group_by("policy", "split").agg(pl.col("correct").cast(pl.Float64).mean().alias("accuracy"),
                                                       pl.len().alias("tasks")).sort("policy", "split"))
    assert result.height == expected.height > 0
    assert result["accuracy"].to_list() == pytest.approx(expected["accuracy"].to_list())
    assert result["tasks"].to_list() == expected["tasks"].to_list()


def test_audits_are_placed_once_and_refused_when_they_cannot_be(tmp_path):
    from apsft_dagster.assets.audits import place_audits
    from apsft_dagster.experiment.stages import PLAN
    from apsft_dagster.loss_mask.stages import LOSS_MASK_STAGES
    from apsft_dagster.run_report.stages import RUN_REPORT_STAGES

    placed = [a.key.to_user_string() for stages in (STAGES, LOSS_MASK_STAGES, RUN_REPORT_STAGES)
              for s in stages for a in s.assets if a.key.to_user_string().startswith("audit_")]
    assert sorted(placed) == sorted(f"audit_{a.name}" for a in discover())  # every audit in exactly one wing
    across = _audit_file(tmp_path, "across", "select * from sft_rows join lm_census using (dataset)")
    with pytest.raises(AuditError, match="across.sql: reads .*lm_census.* from another system"):
        place_audits(PLAN, [across])
    late = _audit_file(tmp_path, "late", "select * from sft_rows")
    with pytest.raises(AuditError, match="late.sql: its inputs are written by sft_arms_job, after every stage"):
        place_audits([s for s in PLAN if not s.hosts_audits], [late])


def test_every_audit_says_which_command_materializes_it():
    """A catalog after `apsft run` shows the sibling systems' audits unmaterialized: each says why."""
    from apsft_dagster.experiment.stages import STAGES
    from apsft_dagster.loss_mask.stages import LOSS_MASK_STAGES
    from apsft_dagster.run_report.stages import RUN_REPORT_STAGES

    for stages, command in ((STAGES, "`apsft run` (the experiment)"),
                            (LOSS_MASK_STAGES, "`apsft loss-mask run NAME` (the loss-mask curation), not by"),
                            (RUN_REPORT_STAGES, "`apsft rl-report add NAME FOLDER` (the RL run report), not by")):
        audits = [a for s in stages for a in s.assets if a.key.to_user_string().startswith("audit_")]
        assert audits, command
        for a in audits:
            assert f"Materialized by {command}" in a.descriptions_by_key[a.key], a.key


def test_each_system_keeps_its_audits_in_its_own_group():
    """The experiment's `audits` group holds only its own audits, so after `apsft run` none in it
    reads "Never materialized"; a sibling system's audits sit in that system's group."""
    from apsft_dagster.experiment.stages import STAGES
    from apsft_dagster.loss_mask.stages import LOSS_MASK_STAGES
    from apsft_dagster.run_report.stages import RUN_REPORT_STAGES

    for stages, group in ((STAGES, "audits"), (LOSS_MASK_STAGES, "loss_mask"), (RUN_REPORT_STAGES, "run_report")):
        audits = [a for s in stages for a in s.assets if a.key.to_user_string().startswith("audit_")]
        assert audits and {a.group_names_by_key[a.key] for a in audits} == {group}, group
