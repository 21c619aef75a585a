"""Issue 58, item 3: four rules of docs/PROTOCOL.md, each through the code path that enforces it, on hand-made inputs.

(a) section 13: a base accuracy outside (5%, 95%) is a warning, never a stop: the analysis writes its verdict,
    the check fails with severity WARN, the runner goes on, the report says why.
(b) section 6: `full`'s reference instrument scores one record per forward, no padding; smoke's batches
    equal batch-one scores computed independently within the stated 1e-5 nats.
(c) section 14: Stage B evaluates the Stage A splits whole, plus `rendering` (a declared project choice).
(d) section 14: SHORTEST_BANKING_LEADS = shortest_natural is the strongest of the six trace arms, strictly.
"""

import dagster as dg
import polars as pl
import pytest
import torch

from apsft_dagster.core.analysis import BASELINES, POTENTIAL, SHORTEST, SHUFFLE, stage_a_decision
from apsft_dagster.core.config import load_config
from apsft_dagster.core.protocol import BOUNDARY, format_answer, format_prompt, locate_spans
from apsft_dagster.core.selection.arms import ARMS

# --- (a) the base-accuracy check is a warning

CELLS = {"core_iid": [("caravan", 1), ("foundry_ledger", 2)], "core_hard": [("caravan", 4)],
         "held_family": [("brinework", 1)]}


def _eval_table(policy: str, arm: str, right: int) -> pl.DataFrame:
    """Two tasks per cell; the first `right` tasks of every split answered correctly."""
    rows = []
    for split, cells in CELLS.items():
        tasks = [(f, lv, i) for f, lv in cells for i in range(2)]
        rows += [{"policy": policy, "arm": arm, "task_id": f"{split}-{f}-L{lv}-{i:03d}", "split": split, "family": f,
                  "level": lv, "correct": n < right, "parsed": True, "closed": True, "loop": False,
                  "thought_tokens": 10 + n, "forward_tokens": 40 + n} for n, (f, lv, i) in enumerate(tasks)]
    return pl.DataFrame(rows)


def _analysis_store(root, base_right: int):
    from apsft_dagster.core.evaluation.summary import JOINT_ARM
    from apsft_dagster.core.layout import arm_rows, eval_table
    from apsft_dagster.core.policies import BASE, arm_and_seed, stage_a_eval_keys
    from apsft_dagster.core.store import Store

    store = Store(root)
    for policy in stage_a_eval_keys(load_config("smoke")):
        arm = BASE if policy == BASE else arm_and_seed(policy)[0]
        store.put_parquet(eval_table(policy), _eval_table(policy, arm, base_right if policy == BASE else 2))
    joint = pl.DataFrame([{"task_id": f"{f}-L{lv}-000", "row": r, "family": f, "level": lv,
                           "mode": ("best", "near_best_diverse")[r], "gap": 0.1 * r}
                          for f, lv in CELLS["core_iid"] for r in (0, 1)])
    store.put_parquet(arm_rows(JOINT_ARM), joint)
    return store


@pytest.mark.parametrize(("base_right", "informative"), [(0, False), (6, False), (2, True)])
def test_a_base_accuracy_at_a_floor_or_ceiling_warns_and_the_run_goes_on_to_its_verdict(tmp_path, base_right,
                                                                                        informative):
    """0 of 4 core-IID tasks (a floor), 4 of 4 (a ceiling), 2 of 4: the verdict is written each time; the
    check is WARN and not blocking, and the runner's outcome of the run is ok (it does not stop)."""
    from apsft_dagster.core.layout import STAGE_A_DECISION
    from apsft_dagster.experiment.assets.analysis import stage_a_analysis
    from apsft_dagster.resources import ExperimentResource
    from apsft_dagster.runner import StageOutcome, _collect
    from apsft_dagster.sensors.rules import run_alerts

    store = _analysis_store(tmp_path / "store", base_right)
    assert [(s.name, s.blocking) for s in stage_a_analysis.check_specs] == [("base_accuracy_informative", False)]
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([stage_a_analysis], instance=instance, resources={
        "experiment": ExperimentResource(profile="smoke", store_dir=str(tmp_path / "store"))})
    assert result.success and store.get_json(STAGE_A_DECISION)["verdict"]
    [check] = result.get_asset_check_evaluations()
    assert (check.passed, check.severity) == (informative, dg.AssetCheckSeverity.WARN)
    metadata = result.asset_materializations_for_node("stage_a_analysis")[0].metadata
    assert metadata["base_accuracy_informative"].value is informative
    assert metadata["base_core_iid_accuracy"].value == min(base_right, 4) / 4
    outcome = StageOutcome("stage_a_job")
    _collect(instance, result.run_id, outcome)
    assert outcome.ok and outcome.recorded == ([] if informative else [("stage_a_analysis", check.check_name)])
    alerts = run_alerts(instance, result.run_id)
    if informative:
        assert check.description is None and alerts == []
    else:  # one alert, saying why the verdict may say little
        assert [(a["check_name"], a["severity"]) for a in alerts] == [(check.check_name, "WARN")]
        assert alerts[0]["description"] == check.description and check.description.endswith("may be uninformative")


def test_a_the_report_states_the_warning_and_why():
    from apsft_dagster.core.policies import BASE
    from apsft_dagster.core.report import _base_accuracy

    def line(accuracy):
        return _base_accuracy({"figures": {BASE: {"core_iid_accuracy": accuracy}}})

    assert line(0.25) == ("- Base accuracy check: passed, base core-IID accuracy 0.2500 is inside (5%, 95%): the "
                          "comparison can move")
    assert line(0.05).startswith("- Base accuracy check: **warning**, base core-IID accuracy 0.0500 is outside")
    assert "at a floor" in line(0.0) and "at a ceiling" in line(0.95) and "at a ceiling" in line(1.0)


# --- (b) the reference instrument's batching


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    """The embedded layout (Qwen3.5: linear-attention layers), random weights."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.tiny import tiny_snapshot

    path = tiny_snapshot(tmp_path_factory.mktemp("hybrid") / "model", "qwen3_5", seed=3, layers=2)
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def _items(n: int = 12) -> list[tuple[str, str, str]]:
    """Records of many lengths (0 to 90 thought characters), so smoke's batches pad most rows."""
    return [(format_prompt(f"Add {i} and {i + 2}."), "".join("0123456789 +=.\n"[(i * 7 + j) % 15]
                                                              for j in range(i * 8)), format_answer(str(2 * i + 2)))
            for i in range(n)]


def _batch_one(model, tok, prompt, thought, answer) -> tuple[float, float]:
    """Independent: one unpadded forward, full logits in float64, tokens assigned by character offsets."""
    text = prompt + thought + BOUNDARY + answer
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    with torch.no_grad():
        logprobs = torch.log_softmax(model(input_ids=torch.tensor([enc["input_ids"]])).logits[0].double(), dim=-1)
    picked = [(enc["offset_mapping"][i][0], float(logprobs[i - 1, enc["input_ids"][i]]))
              for i in range(1, len(enc["input_ids"]))]
    answer_at, boundary_at = len(text) - len(answer), len(prompt + thought)
    return sum(lp for at, lp in picked if at >= answer_at), sum(lp for at, lp in picked if at >= boundary_at)


def _forwards(model) -> tuple[list[tuple[int, int]], object]:
    """The (rows, tokens) of every forward from now on, and the hook's handle."""
    shapes: list[tuple[int, int]] = []
    handle = model.register_forward_pre_hook(
        lambda m, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    return shapes, handle


def test_b_full_scores_one_record_per_forward_and_smoke_batches_within_the_stated_tolerance(hybrid, tmp_path,
                                                                                            monkeypatch):
    from apsft_dagster.core.instruments import ReferenceInstrument
    from apsft_dagster.core.scoring import score_trace

    model, tok = hybrid
    monkeypatch.setenv("APSFT_MODEL_DIR", str(tmp_path / "no-snapshot-here"))
    full = load_config("full", require_snapshot=False).scoring.reference_batch_tokens
    smoke = load_config("smoke").scoring.reference_batch_tokens
    assert (full, smoke) == (None, 8192)
    items = _items()
    lengths = [len(locate_spans(tok, *item).input_ids) for item in items]
    shapes, handle = _forwards(model)
    one = ReferenceInstrument(model, tok, full).score(items)
    assert shapes == [(1, n) for n in lengths]  # a forward per record, its own length: no padding
    shapes.clear()
    batched = ReferenceInstrument(model, tok, smoke).score(items)
    handle.remove()
    assert len(shapes) < len(items) and any(rows > 1 for rows, _ in shapes)  # smoke really batches here
    assert one == [score_trace(model, tok, *item) for item in items]
    for item, o, b in zip(items, one, batched):  # the stated tolerance, 1e-5 nats (PROTOCOL.md section 6)
        answer, joint = _batch_one(model, tok, *item)
        assert (b["n_answer_tokens"], b["n_joint_tokens"]) == (o["n_answer_tokens"], o["n_joint_tokens"])
        for scored in (o, b):
            assert scored["answer_logprob"] == pytest.approx(answer, abs=1e-5)
            assert scored["joint_logprob"] == pytest.approx(joint, abs=1e-5)


def test_b_the_scoring_resource_builds_the_reference_instrument_as_the_profile_says(tmp_path, monkeypatch):
    from apsft_dagster.resources import ExperimentResource, ScoringResource
    from conftest import variant_config

    monkeypatch.setattr(ScoringResource, "_model", lambda self: ("model", "tokenizer", "path"))
    built = {}
    for value in (None, 8192, 300):
        (tmp_path / str(value)).mkdir()
        path = variant_config(tmp_path / str(value), lambda r: r["scoring"].update(reference_batch_tokens=value))
        scorer = ScoringResource(experiment=ExperimentResource(config_path=str(path), store_dir=str(tmp_path)))
        built[value] = scorer._build("reference").batch_tokens
    assert built == {None: None, 8192: 8192, 300: 300}


def test_b_smoke_keeps_its_digest_and_full_is_the_registered_instrument(monkeypatch, tmp_path):
    """The new key leaves smoke's digest (every receipt binds it) and changes full's."""
    from apsft_dagster.core.config import LATE_FIELDS
    from conftest import variant_config

    assert LATE_FIELDS["scoring.reference_batch_tokens"] == 8192
    smoke = load_config("smoke")
    assert smoke.digest.startswith("313ee1a8bc18")
    none = load_config(path=variant_config(tmp_path, lambda r: r["scoring"].update(reference_batch_tokens=None)))
    assert none.digest != smoke.digest


# --- (c) Stage B's splits


def test_c_stage_b_evaluates_the_stage_a_splits_whole_and_rendering(monkeypatch, tmp_path):
    from apsft_dagster.core.evaluation.generations import eval_tasks
    from apsft_dagster.core.plan.stages import split_size
    from apsft_dagster.core.splits import STAGE_A_SPLITS, STAGE_B_SPLITS
    from apsft_dagster.core.tasks.catalog import build_catalog
    from apsft_dagster.core.tasks.splits import render_second

    monkeypatch.setenv("APSFT_MODEL_DIR", str(tmp_path / "no-snapshot-here"))
    config = load_config("full", require_snapshot=False)
    catalog = build_catalog(config)
    stage_a, stage_b = eval_tasks(catalog, STAGE_A_SPLITS), eval_tasks(catalog, STAGE_B_SPLITS)
    sizes = dict(stage_b.group_by("split").len().iter_rows())
    assert sizes == {"core_iid": 180, "core_hard": 60, "held_family": 60, "rendering": 180}
    assert sum(split_size(config, s) for s in STAGE_B_SPLITS) == stage_b.height == 480
    assert stage_a.join(stage_b, on="task_id", how="anti").height == 0  # every Stage A task, whole
    iid = stage_a.filter(pl.col("split") == "core_iid")
    rendering = stage_b.filter(pl.col("split") == "rendering")
    paired = rendering.join(iid, on=["family", "level", "index", "seed", "answer"], suffix="_iid")
    assert paired.height == 180
    assert paired["prompt"].to_list() == [render_second(p) for p in paired["prompt_iid"]]


# --- (d) SHORTEST_BANKING_LEADS


def _results(correct: dict[str, int], tasks: int = 10) -> pl.DataFrame:
    """Core-IID results: `correct[arm]` of `tasks` tasks right (base 0 unless given)."""
    return pl.DataFrame([{"arm": arm, "task_id": f"t{i:02d}", "split": "core_iid", "family": "caravan",
                          "correct": i < correct.get(arm, 0), "parsed": True}
                         for arm in ("base", *ARMS) for i in range(tasks)])


def _leads(correct: dict[str, int]) -> dict:
    return stage_a_decision(_results(correct), thresholds=load_config("smoke").stage_b, n_resamples=200, seed=0)


def test_d_shortest_leads_only_as_the_strongest_of_the_six_trace_arms():
    others = {arm: 4 for arm in ARMS if arm != SHORTEST}
    assert _leads({**others, SHORTEST: 5})["shortest_leads"]
    tie = _leads({**others, BASELINES[0]: 5, SHORTEST: 5})  # smoke's case: a tie for the top
    assert not tie["shortest_leads"] and tie["strongest_baseline"] == BASELINES[0]
    beaten = _leads({**others, SHORTEST: 6, POTENTIAL[0]: 7})  # the strongest baseline, not the strongest arm
    assert beaten["strongest_baseline"] == SHORTEST and not beaten["shortest_leads"]
    assert not _leads({**others, SHORTEST: 6, SHUFFLE: 7})["shortest_leads"]  # the shuffle is a trace arm too
    assert _leads({**others, SHORTEST: 5, "base": 9})["shortest_leads"]  # base is not a trace arm
