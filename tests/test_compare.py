"""`apsft compare` on README command 1's finished smoke store (`cli_run`): beside itself, beside a copy that a
different experiment would differ from (one config field and its digest, one arm's evaluation rows, each
rewritten in the store's own formats), and refusing stores that are not finished experiments. Every expected
number is computed here from the store's files with polars, not read from the documents compare reads."""

from __future__ import annotations

import copy
import hashlib
import shutil

import polars as pl
import pytest

from apsft_dagster.cli import main
from apsft_dagster.core.compare import compare_stores
from apsft_dagster.core.config import canonical_json, load_config
from apsft_dagster.core.errors import CompareError
from apsft_dagster.core.layout import DESIGN_ANCHOR, EVIDENCE_SEAL, STAGE_A_DECISION, arm_rows, eval_table, shards_glob
from apsft_dagster.core.selection.arms import ARMS, arms_with
from apsft_dagster.core.store import Store

CHANGED_ARM = arms_with(role="potential")[0]  # answer_potential: one of its core-IID rows turns correct


def _section(doc: dict, title: str) -> list[dict]:
    return next(rows for name, _, rows in doc["sections"] if name.startswith(title))


def _accuracy(root, policy: str) -> tuple[float, int]:
    """core-IID accuracy = correct / total of a policy's evaluation table, and the total."""
    table = pl.read_parquet(root / eval_table(policy)).filter(pl.col("split") == "core_iid")
    return table["correct"].sum() / table.height, table.height


def _policy(arm: str, seed: int = 42) -> str:
    return arm if arm == "base" else f"{arm}-seed{seed}"


@pytest.fixture
def store_a(cli_run):
    return cli_run[1].root


def test_a_store_beside_itself_differs_in_nothing(store_a, tmp_path, capsys):
    doc = compare_stores(str(store_a), str(store_a))
    assert doc["config_differences"] == []
    traces = pl.read_parquet(store_a / shards_glob("trace_bank"))
    banks = {r["what"]: r for r in _section(doc, "Banks")}
    assert (banks["traces"]["A"], banks["eligible traces"]["B"], banks["traces"]["B - A"]) == (
        str(traces.height), str(traces["eligible"].sum()), "+0")
    selection = {r["arm"]: r for r in _section(doc, "Selection")}
    assert {arm: (selection[arm]["rows A"], selection[arm]["rows B"]) for arm in ARMS} == {
        arm: (str(n), str(n)) for arm in ARMS for n in [pl.read_parquet(store_a / arm_rows(arm)).height]}
    for arm in ("base", *ARMS):
        expected, _ = _accuracy(store_a, _policy(arm))
        assert doc["accuracy"]["A"][arm][0] == doc["accuracy"]["B"][arm][0] == pytest.approx(expected)
    assert {r["B - A"] for r in _section(doc, "Stage A accuracy")} == {"+0.0000"}
    assert {r["same"] for r in _section(doc, "Verdicts")} == {"yes"}

    outs = [tmp_path / "one", tmp_path / "two"]
    for out in outs:  # the command's report and plot: the same bytes each time
        assert main(["compare", str(store_a), str(store_a), "--out", str(out)]) == 0
    assert "Config differences" in capsys.readouterr().out
    assert [(out / "compare.md").read_bytes() for out in outs][0] == (outs[1] / "compare.md").read_bytes()
    assert (outs[0] / "accuracy.png").read_bytes() == (outs[1] / "accuracy.png").read_bytes()
    assert (outs[0] / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _record_config(store: Store, field: tuple[str, str], value) -> str:
    """Record in the copy a config that differs in one field: its body in a design anchor (the shape `apsft
    freeze` writes) and its digest (SHA-256 of the canonical body, as `Config.digest`) in the evidence seal."""
    body = copy.deepcopy(load_config("smoke").digest_body)
    body[field[0]][field[1]] = value
    digest = hashlib.sha256(canonical_json(body)).hexdigest()
    store.put_json(DESIGN_ANCHOR, {"format": "apsft-design-anchor/1", "profile": "smoke", "config_digest": digest,
                                   "config": body, "code_patterns": [], "code": {}, "code_digest": "0" * 64,
                                   "date": "2026-12-01T00:00:00+00:00", "rationale": "a test's other design",
                                   "evidence": {}, "amendments": 0})
    store.put_json(EVIDENCE_SEAL, {**store.get_json(EVIDENCE_SEAL), "config_digest": digest})
    return digest


def _turn_one_row_correct(store: Store, policy: str) -> None:
    table = store.get_parquet(eval_table(policy))
    wrong = table.filter((pl.col("split") == "core_iid") & ~pl.col("correct"))["task_id"].sort()[0]
    store.put_parquet(eval_table(policy), table.with_columns(
        pl.when(pl.col("task_id") == wrong).then(True).otherwise(pl.col("correct")).alias("correct")))


def _reanalyse(store: Store) -> None:
    """Stage A's analysis over the edited tables, as the stage_a_analysis asset computes it."""
    from apsft_dagster.core.analysis import stage_a_decision
    from apsft_dagster.core.evaluation.summary import policy_figures

    config = load_config("smoke")
    ev, seed = config.evaluation, config.seeds.experiment
    policies = [_policy(arm) for arm in ("base", *ARMS)]
    results = pl.concat([store.get_parquet(eval_table(p)) for p in policies])
    decision = stage_a_decision(results, n_resamples=ev.bootstrap_resamples, seed=seed, thresholds=config.stage_b,
                                confidence=ev.confidence)
    figures = {p: policy_figures(results.filter(pl.col("policy") == p), n_resamples=ev.bootstrap_resamples,
                                 seed=seed, confidence=ev.confidence) for p in policies}
    store.put_json(STAGE_A_DECISION, {**store.get_json(STAGE_A_DECISION), "verdict": decision["verdict"],
                                      "decision": decision, "policies": figures})


def test_a_copy_with_another_config_and_other_evaluations(store_a, tmp_path):
    shutil.copytree(store_a, tmp_path / "b")
    b = Store(tmp_path / "b")
    epochs = load_config("smoke").training.epochs
    digest = _record_config(b, ("training", "epochs"), epochs + 1)
    _turn_one_row_correct(b, _policy(CHANGED_ARM))
    _reanalyse(b)

    doc = compare_stores(str(store_a), str(b.root))
    assert doc["config_differences"] == [{"field": "training.epochs", "A": str(epochs), "B": str(epochs + 1)}]
    stores = {r["what"]: r for r in _section(doc, "Stores")}
    assert stores["config digest"]["B"] == digest == hashlib.sha256(canonical_json(
        b.get_json(DESIGN_ANCHOR)["config"])).hexdigest()
    assert stores["config fields from"]["B"] == "its design anchor"
    assert stores["config fields from"]["A"].startswith("evidence_seal_config.json")  # the run kept the body

    (acc_a, n), (acc_b, _) = _accuracy(store_a, _policy(CHANGED_ARM)), _accuracy(b.root, _policy(CHANGED_ARM))
    assert acc_b - acc_a == pytest.approx(1 / n)
    assert doc["accuracy"]["B"][CHANGED_ARM][0] == pytest.approx(acc_b)
    row = next(r for r in _section(doc, "Stage A accuracy") if r["policy"] == CHANGED_ARM)
    assert row["B - A"] == f"{acc_b - acc_a:+.4f}"
    others = {r["B - A"] for r in _section(doc, "Stage A accuracy") if r["policy"] != CHANGED_ARM}
    assert others == {"+0.0000"}

    # the margin over the strongest baseline, the baseline found here from the tables (first best, in tie order)
    for side, root in (("A", store_a), ("B", b.root)):
        acc = {arm: _accuracy(root, _policy(arm))[0] for arm in arms_with(role="baseline")}
        baseline = next(arm for arm in acc if acc[arm] >= max(acc.values()) - 1e-9)
        margin = _accuracy(root, _policy(CHANGED_ARM))[0] - acc[baseline]
        shown = next(r for r in _section(doc, "Margins") if r["arm"] == CHANGED_ARM)
        assert (shown[f"baseline {side}"], shown[f"margin {side}"].split()[0]) == (baseline, f"{margin:.4f}")


def test_a_store_that_is_not_a_finished_experiment_is_refused_by_name(store_a, tmp_path, capsys):
    unfinished = tmp_path / "unfinished"
    shutil.copytree(store_a, unfinished, ignore=shutil.ignore_patterns("stage_a_analysis"))
    (tmp_path / "plain").mkdir()
    out = tmp_path / "out"
    for other, said in ((unfinished, "missing stage_a_analysis/analysis.json (the stage_a_analysis stage)"),
                        (tmp_path / "plain", "not an apsft store"), (tmp_path / "absent", "no such folder")):
        assert main(["compare", str(store_a), str(other), "--out", str(out)]) == 2
        assert f"store {other}: {'not a finished experiment (' if other == unfinished else ''}{said}" \
            in capsys.readouterr().err
        assert not out.exists()
    with pytest.raises(CompareError, match=f"store {tmp_path / 'absent'}: no such folder.*store {unfinished}: "):
        compare_stores(str(tmp_path / "absent"), str(unfinished))
    (tmp_path / "a file").write_text("")
    assert main(["compare", str(store_a), str(store_a), "--out", str(tmp_path / "a file")]) == 2
    assert "a file, not a folder" in capsys.readouterr().err
