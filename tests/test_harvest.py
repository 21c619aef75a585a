"""The natural-thought protocol: continuation, loops, eligibility, top-ups, exclusion."""

import polars as pl
import pytest

from apsft_dagster.core.base_model import base_model_path
from apsft_dagster.core.config import load_config
from apsft_dagster.core.embedded.tokenizer import train_tokenizer
from apsft_dagster.core.engines.base import Completion, GenerationRequest, cut_at_stop
from apsft_dagster.core.harvest import HarvestTask, harvest_task
from apsft_dagster.core.protocol import IM_END, STOP_TOKENS, THINK_CLOSE, format_prompt, format_record
from apsft_dagster.core.seeds import derive_seed

TASK = HarvestTask("caravan-L1-000", "caravan", 1, "Count the salt.", "7")


@pytest.fixture(scope="module")
def tokenizer():
    texts = [format_record(f"Count {i} salt.", f"Step {i}: salt {i} + 1 = {i + 1}.\n", str(i + 1)) for i in range(300)]
    return train_tokenizer(texts, vocab_size=400)


class ScriptedEngine:
    """Returns completions from a script and records every request (a test double of the engine API)."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script, self.requests = tokenizer, script, []
        self.stop_token_ids = tuple(tokenizer.convert_tokens_to_ids([THINK_CLOSE, IM_END]))

    def generate(self, requests, sampling):
        self.requests += requests
        return [self.script(r) for r in requests]


def _cfg(**harvest):
    config = load_config("smoke")
    return config.harvest.model_copy(update=harvest)


def _ids(tok, text):
    return tuple(tok(text, add_special_tokens=False)["input_ids"])


def test_continuation_loop_and_eligibility(tokenizer):
    close, end = tokenizer.convert_tokens_to_ids([THINK_CLOSE, IM_END])
    step = _ids(tokenizer, "Step 3: salt 3 + 1 = 4.\n")
    prompt_ids = _ids(tokenizer, format_prompt(TASK.prompt))
    cfg = _cfg(samples_per_task=4, allowance=80, continuation=20, min_eligible=2)

    def script(r: GenerationRequest):
        if r.prompt_ids == prompt_ids:  # the main batch
            return [Completion(step + (close,), "stop"),
                    Completion((step * 20)[:80], "length"),       # allowance contact: a loop (period len(step))
                    Completion(tuple(range(20, 100)), "length"),  # allowance contact, no loop: continue once
                    Completion(step + (end,), "stop")]            # ended the turn without closing
        return [Completion(step + (close,), "stop")]              # the continuation closes

    engine = ScriptedEngine(tokenizer, script)
    rows = harvest_task(engine, tokenizer, TASK, cfg, experiment_seed=42)
    assert rows["finish_reason"].to_list() == ["close", "length", "close", "end_of_turn"]
    assert rows["continued"].to_list() == [False, False, True, False]
    assert rows["loop"].to_list() == [False, True, False, False]
    assert rows["loop_period"].to_list()[1] == len(step)
    assert rows["eligible"].to_list() == [True, False, True, False]
    assert rows["closed"].to_list() == [True, False, True, False]
    # exactly one continuation, of the exact token prefix (prompt + sampled ids), with its own seed
    [main, cont] = engine.requests
    assert cont.prompt_ids == prompt_ids + tuple(range(20, 100)) and cont.max_tokens == 20 and cont.n == 1
    assert rows["token_ids"][2].to_list() == list(range(20, 100)) + list(step) + [close]
    assert main.seed == derive_seed(42, TASK.task_id, "main") == rows["seed"][0]
    assert rows["continuation_seed"][2] == derive_seed(main.seed, "continuation", 2)
    assert rows["n_thought_tokens"][0] == len(step) and rows["thought"][0] == "Step 3: salt 3 + 1 = 4.\n"
    assert rows["task_excluded"].to_list() == [False] * 4


def test_topups_then_exclusion(tokenizer):
    end = tokenizer.convert_tokens_to_ids(IM_END)
    cfg = _cfg(samples_per_task=3, topup_batches=4, topup_size=2, min_eligible=2)
    engine = ScriptedEngine(tokenizer, lambda r: [Completion((5, 6, end), "stop")] * r.n)
    rows = harvest_task(engine, tokenizer, TASK, cfg, experiment_seed=42)
    assert rows.height == 3 + 4 * 2
    assert rows["batch"].unique(maintain_order=True).to_list() == ["main", "topup1", "topup2", "topup3", "topup4"]
    assert [r.seed for r in engine.requests] == [derive_seed(42, TASK.task_id, b)
                                                 for b in ("main", "topup1", "topup2", "topup3", "topup4")]
    assert rows["task_excluded"].all() and not rows["eligible"].any()
    assert rows["trace_id"].n_unique() == rows.height


def test_topups_stop_once_enough_are_eligible(tokenizer):
    close, end = tokenizer.convert_tokens_to_ids([THINK_CLOSE, IM_END])
    batches = iter([[Completion((5, close), "stop")] + [Completion((5, end), "stop")] * 2,  # main: 1 eligible
                    [Completion((6, close), "stop"), Completion((6, end), "stop")]])       # topup1: +1
    engine = ScriptedEngine(tokenizer, lambda r: next(batches))
    rows = harvest_task(engine, tokenizer, TASK, _cfg(samples_per_task=3, topup_size=2, min_eligible=2), 42)
    assert rows.height == 5 and rows["eligible"].sum() == 2 and not rows["task_excluded"].any()


def test_record_limit_makes_a_closed_trace_ineligible(tokenizer):
    close = tokenizer.convert_tokens_to_ids(THINK_CLOSE)
    long_thought = _ids(tokenizer, "Step 1: salt 1 + 1 = 2.\n" * 30)
    engine = ScriptedEngine(tokenizer, lambda r: [Completion(long_thought + (close,), "stop")] * r.n)
    rows = harvest_task(engine, tokenizer, TASK, _cfg(samples_per_task=2, allowance=2000, record_limit=200,
                                                      topup_batches=0), 42)
    assert rows["closed"].all() and (rows["n_record_tokens"] > 200).all() and not rows["eligible"].any()
    assert rows["task_excluded"].all()


def test_cut_at_stop():
    assert cut_at_stop([4, 9, 1, 0, 0], [1, 2], 5) == Completion((4, 9, 1), "stop")
    assert cut_at_stop([4, 9, 3], [1, 2], 3) == Completion((4, 9, 3), "length")


def test_real_continuation_is_prefix_identical(smoke_run):
    """With the embedded model: a sample cut at the allowance is continued from its exact ids."""
    from apsft_dagster.core.engines.transformers_engine import TransformersEngine

    _, store = smoke_run
    config = load_config("smoke")
    engine = TransformersEngine.load(str(base_model_path(config, store)), STOP_TOKENS)
    catalog = (store.get_parquet("task_catalog.parquet").filter(pl.col("task_id") == "runeward-L3-000")
               .row(0, named=True))
    task = HarvestTask(catalog["task_id"], "runeward", 3, catalog["prompt"], catalog["answer"])
    cfg = config.harvest.model_copy(update={"allowance": 12, "continuation": 400, "samples_per_task": 3})
    rows = harvest_task(engine, engine.tokenizer, task, cfg, config.seeds.experiment)
    prompt_ids = _ids(engine.tokenizer, format_prompt(task.prompt))
    [originals] = engine.generate([GenerationRequest(prompt_ids, 3, 12, derive_seed(42, task.task_id, "main"))],
                                  cfg.sampling)
    assert all(o.finish_reason == "length" and len(o.token_ids) == 12 for o in originals)
    assert rows["continued"].all()
    for row, original in zip(rows.iter_rows(named=True), originals):
        assert row["token_ids"][:12] == list(original.token_ids)
        assert row["n_tokens"] > 12
