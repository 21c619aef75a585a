"""vLLM on the base model (one LLM for the module): greedy output equal to the Transformers
engine's token for token on every smoke prompt, seeded sampling, and the prompt-logprob
instrument against the reference scorer, item by item."""

from __future__ import annotations

import pytest

from apsft_dagster.core.engines.base import GREEDY, GenerationRequest
from apsft_dagster.core.engines.lifetime import load_causal_lm
from apsft_dagster.core.engines.transformers_engine import TransformersEngine
from apsft_dagster.core.engines.vllm_scoring import VllmInstrument
from apsft_dagster.core.instruments import ReferenceInstrument
from apsft_dagster.core.protocol import STOP_TOKENS, format_answer, format_prompt, prompt_ids
from apsft_dagster.core.tasks.catalog import build_catalog

SCORE_TOLERANCE = 1e-4  # nats per summed span: float32 on both sides, different kernels


@pytest.fixture(scope="module")
def engine(lane):
    yield from lane.serve(lane.base, "base model (test_vllm_base)")


@pytest.fixture(scope="module")
def catalog(lane):
    return build_catalog(lane.config)


def requests(tokenizer, prompts, max_tokens, seed=0, n=1):
    return [GenerationRequest(tuple(prompt_ids(tokenizer, p)), n, max_tokens, seed) for p in prompts]


def test_greedy_equals_the_transformers_engine_on_every_smoke_prompt(lane, engine, catalog):
    prompts = catalog["prompt"].to_list()
    reference = TransformersEngine.load(lane.base, STOP_TOKENS)
    batch = requests(engine.tokenizer, prompts, lane.config.harvest.allowance)
    assert batch == requests(reference.tokenizer, prompts, lane.config.harvest.allowance)
    got, want = engine.generate(batch, GREEDY), reference.generate(batch, GREEDY)
    assert len(got) == len(prompts) == catalog.height
    differing = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
    assert not differing, f"{len(differing)} of {len(prompts)} prompts differ, first {prompts[differing[0]]!r}"
    # not a degenerate agreement: real, varied thoughts, most of them closed by the model itself
    outputs = {c[0].token_ids for c in got}
    assert len(outputs) > len(prompts) // 2 and sum(c[0].finish_reason == "stop" for c in got) > len(prompts) // 2


def test_sampling_is_seeded_per_request(lane, engine, catalog):
    prompt = catalog["prompt"][0]
    sampling = lane.config.harvest.sampling
    first = engine.generate(requests(engine.tokenizer, [prompt], 64, seed=7, n=4), sampling)
    again = engine.generate(requests(engine.tokenizer, [prompt, prompt], 64, seed=7, n=4), sampling)
    other = engine.generate(requests(engine.tokenizer, [prompt], 64, seed=8, n=4), sampling)
    assert again == [first[0], first[0]]  # the same seed gives the same samples, whatever else is in the batch
    assert other != first and len({c.token_ids for c in first[0]}) > 1


def test_the_vllm_instrument_matches_the_reference_scorer(lane, engine, catalog):
    model, tokenizer = load_causal_lm(lane.base, lane.config.compute)
    reference = ReferenceInstrument(model, tokenizer)
    fast = VllmInstrument.from_llm(engine.llm, engine.tokenizer)  # borrowed: the module's one LLM
    items = []
    for prompt, answer in catalog.select("prompt", "answer").head(12).iter_rows():
        x = format_prompt(prompt)
        items += [(x, "", format_answer(answer)), (x, "Step 1: check the ledger.\n", format_answer(answer)),
                  (x, "", format_answer(answer + "0"))]
    got, want = fast.score(items), reference.score(items)
    fast.close()
    assert engine.llm is not None  # a borrower's close leaves the owner's engine serving
    for g, w in zip(got, want):
        assert (g["n_answer_tokens"], g["n_joint_tokens"]) == (w["n_answer_tokens"], w["n_joint_tokens"])
        assert g["answer_logprob"] == pytest.approx(w["answer_logprob"], abs=SCORE_TOLERANCE)
        assert g["joint_logprob"] == pytest.approx(w["joint_logprob"], abs=SCORE_TOLERANCE)
    worst = max(abs(g[k] - w[k]) for g, w in zip(got, want) for k in ("answer_logprob", "joint_logprob"))
    lane.receipt("instrument_agreement.json", {"items": len(items), "max_abs_logprob_difference": worst})
