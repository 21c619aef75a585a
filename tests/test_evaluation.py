"""Stage A evaluation: generations cached by key, parsing apart from generating, batched = one at a time."""

import polars as pl
import pytest

from apsft_dagster.core.config import LoopThresholds, load_config
from apsft_dagster.core.engines.base import Completion
from apsft_dagster.core.evaluation.generations import eval_tasks, generate_policy
from apsft_dagster.core.evaluation.parse import parse_one
from apsft_dagster.core.layout import STAGE_A_DECISION, TASK_CATALOG, eval_generations, eval_table
from apsft_dagster.core.policies import BASE, stage_a_eval_keys

LOOP = LoopThresholds(min_repeats=4, max_period=512, min_span=64)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from tiny import tiny_model

    return AutoTokenizer.from_pretrained(tiny_model(tmp_path_factory.mktemp("tiny"), 0))


class ScriptedEngine:
    """Answers every prompt with the same completion and counts what it was asked."""

    def __init__(self, tokenizer, text: str):
        self.tokenizer, self.asked = tokenizer, []
        self.ids = tuple(tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, requests, sampling):
        self.asked += requests
        assert sampling.temperature == 0 and all(r.n == 1 for r in requests)
        return [[Completion(self.ids, "stop")] for _ in requests]


def _tasks():
    return pl.DataFrame({"task_id": ["t1", "t2", "t3"], "prompt": ["Add 1 and 2.", "Add 2 and 2.", "Add 3 and 2."]})


def test_generations_are_reused_while_their_key_holds(tokenizer, tmp_path):
    engine = ScriptedEngine(tokenizer, "1 + 2 = 3\n</think>\n\nANSWER: 3<|im_end|>")
    first, figures = generate_policy(engine, _tasks(), "model-a", tmp_path, 64, None)
    assert figures == {"generated": 3, "reused": 0, "new_tokens": 3 * len(engine.ids)}
    assert all(r.stop_token_ids == (tokenizer.convert_tokens_to_ids("<|im_end|>"),) for r in engine.asked)
    again, figures = generate_policy(engine, _tasks(), "model-a", tmp_path, 64, first)
    assert figures["generated"] == 0 and again.equals(first) and len(engine.asked) == 3
    _, figures = generate_policy(engine, _tasks(), "model-a", tmp_path, 65, first)  # another allowance
    assert figures["generated"] == 3
    _, figures = generate_policy(engine, _tasks(), "model-b", tmp_path, 64, first)  # another model
    assert figures["generated"] == 3
    more = pl.concat([_tasks(), pl.DataFrame({"task_id": ["t4"], "prompt": ["Add 4 and 2."]})])
    _, figures = generate_policy(engine, more, "model-a", tmp_path, 64, first)  # only the new task
    assert figures == {"generated": 1, "reused": 3, "new_tokens": len(engine.ids)}


def test_parsing_a_completion(tokenizer):
    close = tokenizer.convert_tokens_to_ids("</think>")

    def parse(text, canonical="3"):
        return parse_one(tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer, close, canonical, LOOP)

    ok = parse("1 + 2 = 3\n</think>\n\nANSWER: 3<|im_end|>")
    assert ok["closed"] and ok["parsed"] and ok["correct"] and ok["answer"] == "3"
    assert ok["thought_tokens"] == len(tokenizer("1 + 2 = 3\n", add_special_tokens=False)["input_ids"])
    wrong = parse("1 + 2 = 4\n</think>\n\nANSWER: 4<|im_end|>")
    assert wrong["parsed"] and not wrong["correct"]
    no_line = parse("1 + 2 = 3\n</think>\n\nthree<|im_end|>")
    assert no_line["closed"] and not no_line["parsed"] and not no_line["correct"]
    open_thought = parse("1 + 2 = 3 ANSWER: 3")  # an answer inside an unclosed thought does not count
    assert not open_thought["closed"] and not open_thought["parsed"]
    assert open_thought["thought_tokens"] == len(
        tokenizer("1 + 2 = 3 ANSWER: 3", add_special_tokens=False)["input_ids"])
    assert parse("1 + 2 = 3\n" * 40)["loop"] and not ok["loop"]


def test_the_smoke_stage_a_tables_and_verdict_follow_from_the_rules(smoke_run):
    from apsft_dagster.core.analysis import stage_a_decision

    results, store = smoke_run
    config = load_config("smoke")
    for stage in ("stage_a_generations", "stage_a_eval", "stage_a_analysis"):
        assert results[stage].success
    tasks = eval_tasks(store.get_parquet(TASK_CATALOG))
    assert tasks.height == 36 + 12 + 24
    tables = [store.get_parquet(eval_table(p)) for p in stage_a_eval_keys(config)]
    assert all(t["task_id"].to_list() == tasks["task_id"].to_list() for t in tables)
    doc = store.get_json(STAGE_A_DECISION)
    again = stage_a_decision(pl.concat(tables), n_resamples=config.evaluation.bootstrap_resamples,
                             seed=config.seeds.experiment, thresholds=config.stage_b)
    assert doc["verdict"] == again["verdict"] and doc["decision"]["triggered"] == again["triggered"]
    assert doc["decision"]["accuracy"] == again["accuracy"]
    base = doc["policies"][BASE]["core_iid_accuracy"]
    assert 0.05 < base < 0.95  # the comparison has room to move both ways
    evaluations = results["stage_a_analysis"].get_asset_check_evaluations()
    assert [e.check_name for e in evaluations if e.passed] == ["base_accuracy_informative"]


def test_the_report_is_written_with_its_plots(smoke_run):
    from apsft_dagster.core.layout import REPORT_MARKDOWN, STAGE_B_DECISION, report_plot
    from apsft_dagster.core.report import PLOTS

    _, store = smoke_run
    text = store.get_bytes(REPORT_MARKDOWN).decode()
    verdict = store.get_json(STAGE_A_DECISION)["verdict"]
    final = store.get_json(STAGE_B_DECISION)
    assert f"Stage A verdict: **{verdict}**" in text and f"Final verdict: **{final['final_verdict']}**" in text
    if not final["plan"]["triggered"]:  # Stage B records why it did not run; the Stage A verdict is final
        assert final["final_verdict"] == verdict == "CORE_BANKING_NEGATIVE" and "not triggered" in text
        assert final["plan"]["reasons"]["answer_potential"] and final["plan"]["replication_policies"] == []
    for section in ("## Harvest funnel", "## Parity gate", "## Selection", "## Training", "## Stage A",
                    "### Stage B trigger, condition by condition", "## Amendments and deviations",
                    "## Artifact hashes"):
        assert section in text
    for name in PLOTS:
        assert store.get_bytes(report_plot(name)).startswith(b"\x89PNG")
    conditions = store.get_json(STAGE_A_DECISION)["decision"]["conditions"]
    for arm, c in conditions.items():  # each condition's value and which ones failed, as the rules say
        failed = ", ".join(k for k, ok in c["checks"].items() if not ok) or "none"
        assert f"| {arm} | {c['margin']:.4f} | {c['lower']:.4f} |" in text and f"| {failed} |" in text
        assert f"`{arm}` {c['minimum_detectable_effect']:.3f} at {c['tasks']} tasks" in text  # beside the verdict


@pytest.mark.slow
def test_batched_greedy_equals_one_at_a_time_on_the_smoke_splits(smoke_run):
    """The stored base generations (batched, batches of 32) against the same requests one at a time:
    every third task, so each batch and each split is sampled (benchmarks/bench_evaluation.py
    compares all 72 and prints the count)."""
    from apsft_dagster.core.engines.base import GREEDY, GenerationRequest
    from apsft_dagster.core.engines.transformers_engine import TransformersEngine
    from apsft_dagster.core.protocol import IM_END, format_prompt

    _, store = smoke_run
    config = load_config("smoke")
    engine = TransformersEngine.load(str(store.path("base_model")), ["</think>", IM_END])
    tasks = eval_tasks(store.get_parquet(TASK_CATALOG))
    stored = store.get_parquet(eval_generations(BASE))
    end = engine.tokenizer.convert_tokens_to_ids(IM_END)
    for prompt, ids in list(zip(tasks["prompt"], stored["token_ids"]))[::3]:
        request = GenerationRequest(
            tuple(engine.tokenizer(format_prompt(prompt), add_special_tokens=False)["input_ids"]),
            1, config.evaluation.allowance, 0, stop_token_ids=(end,))
        assert list(engine.generate([request], GREEDY)[0][0].token_ids) == list(ids)


def test_generation_audit_covers_the_bank_every_arm_and_every_policy(smoke_run):
    import glob

    from apsft_dagster.core.layout import GENERATION_AUDIT, arm_rows
    from apsft_dagster.core.selection.arms import ARMS

    results, store = smoke_run
    assert results["generation_audit"].success
    table = store.get_parquet(GENERATION_AUDIT)
    by = {r["group"]: r for r in table.iter_rows(named=True)}
    assert set(by) == {"all traces", *ARMS, *stage_a_eval_keys(load_config("smoke"))}
    bank = pl.concat([pl.read_parquet(f, columns=["trace_id", "loop"])
                      for f in glob.glob(str(store.root / "trace_bank" / "shards" / "*.parquet"))])
    assert by["all traces"]["texts"] == bank.height and by["all traces"]["loop_share"] == float(bank["loop"].mean())
    for arm in ARMS:
        assert by[arm]["texts"] == store.get_parquet(arm_rows(arm)).height, arm
    base = store.get_parquet(eval_table(BASE))
    assert by[BASE]["texts"] == base.height and by[BASE]["loop_share"] == float(base["loop"].mean())
    shares = table.select(pl.selectors.ends_with("_share")).to_numpy()
    assert ((shares >= 0) & (shares <= 1)).all()
