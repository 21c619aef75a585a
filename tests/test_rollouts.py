"""R1 rollouts through a scripted engine and a real (tiny, trained) tokenizer.

Expected prompts, seeds and parses are written out here independently of the protocol module,
so a dropped boundary, a wrong seed key or a parse of the bare continuation fails.
"""

import hashlib

import polars as pl
import pytest

from apsft_dagster.core.config import Rollouts, Sampling
from apsft_dagster.core.embedded.tokenizer import train_tokenizer
from apsft_dagster.core.engines.base import Completion
from apsft_dagster.core.protocol import format_record
from apsft_dagster.core.rollouts import R1_SCHEMA, r1_rollouts
from apsft_dagster.core.seeds import derive_seed

PROMPT = "Count the salt in 6 sacks of 7."
ANSWER = "42"  # canonical answers are already normalized
EXPERIMENT_SEED = 1234
CFG = Rollouts(sampling=Sampling(temperature=0.7, top_p=0.9, top_k=5), max_new_tokens=12)
# x + z + b spelled out by hand (not through protocol.py): Qwen chat turn, `<think>`, thought, boundary.
X = f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n<think>\n"
B = "</think>\n\nANSWER:"


@pytest.fixture(scope="module")
def tok():
    texts = [format_record(f"Count the salt in {i} sacks.", f"Sack {i}: {i} * 7 = {7 * i}.\n", str(7 * i))
             for i in range(200)]
    return train_tokenizer(texts, vocab_size=400)


def _ids(tok, text: str) -> tuple[int, ...]:
    return tuple(tok(text, add_special_tokens=False)["input_ids"])


class ScriptedEngine:
    """A GenerationEngine double: records every call and answers each prompt from a script."""

    def __init__(self, tok, script: dict[tuple[int, ...], Completion]):
        self.tokenizer, self.script, self.calls = tok, script, []
        self.stop_token_ids = tuple(tok.convert_tokens_to_ids(["</think>", "<|im_end|>"]))

    def generate(self, requests, sampling):
        self.calls.append((list(requests), sampling))
        return [[self.script[r.prompt_ids]] for r in requests]


def _traces(thoughts: dict[str, str]) -> pl.DataFrame:
    """Trace-bank rows as r1_labels passes them (extra columns included), deliberately unsorted."""
    ids = list(thoughts)
    return pl.DataFrame({"trace_id": ids, "task_id": ["caravan-L2-007"] * len(ids), "family": ["caravan"] * len(ids),
                         "level": [2] * len(ids), "thought": list(thoughts.values()), "n_tokens": [3] * len(ids)})


def _run(tok, thoughts: dict[str, str], continuations: dict[str, tuple[str, str]]):
    """Continuation text and finish reason per trace id, keyed in the engine by the expected prompt ids."""
    script = {_ids(tok, X + thoughts[t] + B): Completion(_ids(tok, text), finish)
              for t, (text, finish) in continuations.items()}
    engine = ScriptedEngine(tok, script)
    return engine, r1_rollouts(engine, PROMPT, ANSWER, _traces(thoughts), CFG, EXPERIMENT_SEED)


THOUGHTS = {"caravan-L2-007/b0/002": "Sack 6: 6 * 7 = 42.\n", "caravan-L2-007/b0/000": "",
            "caravan-L2-007/b0/001": "Seven sacks twice.\n"}


def test_prompt_is_exactly_x_z_b_and_knobs_come_from_config(tok):
    engine, rows = _run(tok, THOUGHTS, {t: (" 42\n<|im_end|>", "stop") for t in THOUGHTS})
    [(requests, sampling)] = engine.calls  # one batched call for the task
    assert sampling == CFG.sampling
    by_order = sorted(THOUGHTS)
    for trace_id, request in zip(by_order, requests):
        text = X + THOUGHTS[trace_id] + B
        assert request.prompt_ids == _ids(tok, text)
        assert tok.decode(list(request.prompt_ids), skip_special_tokens=False) == text
        assert request.prompt_ids[-len(_ids(tok, B)):] == _ids(tok, B)  # ends on the boundary's own ids
        assert (request.n, request.max_tokens) == (1, CFG.max_new_tokens)
    assert rows.height == len(THOUGHTS)


def test_seed_per_trace_is_the_r1_rule(tok):
    engine, rows = _run(tok, THOUGHTS, {t: (" 42", "length") for t in THOUGHTS})
    [(requests, _)] = engine.calls

    def rule(trace_id):  # first 8 bytes of SHA-256 over "seed|r1|trace", one bit dropped
        return int.from_bytes(hashlib.sha256(f"{EXPERIMENT_SEED}|r1|{trace_id}".encode()).digest()[:8], "big") >> 1

    expected = [rule(t) for t in sorted(THOUGHTS)]
    assert [r.seed for r in requests] == expected == rows["seed"].to_list()
    assert expected == [derive_seed(EXPERIMENT_SEED, "r1", t) for t in sorted(THOUGHTS)]
    assert len(set(expected)) == len(expected)


@pytest.mark.parametrize("continuation, finish, parsed, success", [
    (" 42\n<|im_end|>", "stop", "42", True),
    (" 42", "length", "42", True),                     # parsed from "ANSWER:" + text, no tag in the text
    (" 420<|im_end|>", "stop", "420", False),          # exact equality, not a prefix match
    (" 4", "length", "4", False),
    (" +042.\nThat is all.<|im_end|>", "stop", "42", True),  # sign, leading zero, period and later lines dropped
    ("\n\n<|im_end|>", "stop", None, False),           # no answer on the line: None, never a success
    ("<|im_end|>", "stop", None, False),
])
def test_parse_and_success(tok, continuation, finish, parsed, success):
    thoughts = {"caravan-L2-007/b0/000": "Sack 6: 6 * 7 = 42.\n"}
    _, rows = _run(tok, thoughts, {"caravan-L2-007/b0/000": (continuation, finish)})
    [row] = rows.to_dicts()
    assert row["rollout_text"] == continuation
    assert (row["parsed_answer"], row["success"], row["finish_reason"]) == (parsed, success, finish)


def test_rows_follow_trace_order_and_schema(tok):
    # Each trace gets a different continuation, so a misaligned zip would mislabel successes.
    continuations = {"caravan-L2-007/b0/002": (" 42<|im_end|>", "stop"),
                     "caravan-L2-007/b0/000": (" 7<|im_end|>", "stop"),
                     "caravan-L2-007/b0/001": (" 42.", "length")}
    _, rows = _run(tok, THOUGHTS, continuations)
    assert rows.schema == pl.Schema(R1_SCHEMA)
    assert rows["trace_id"].to_list() == sorted(THOUGHTS)
    assert rows["success"].to_list() == [False, True, True]
    assert rows["rollout_text"].to_list() == [continuations[t][0] for t in sorted(THOUGHTS)]
    assert rows.select("task_id", "family", "level").unique().to_dicts() == [
        {"task_id": "caravan-L2-007", "family": "caravan", "level": 2}]


def test_no_traces_no_generation(tok):
    engine = ScriptedEngine(tok, {})
    rows = r1_rollouts(engine, PROMPT, ANSWER, _traces({}).cast({"level": pl.Int64}), CFG, EXPERIMENT_SEED)
    assert rows.height == 0 and rows.schema == pl.Schema(R1_SCHEMA)
    assert engine.calls == []
