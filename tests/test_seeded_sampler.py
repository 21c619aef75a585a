"""Batched seeded sampling (core/engines/seeded_sampler.py) against Hugging Face's own sampler run
one request at a time: the same tokens, request for request, whatever the batch around it."""

import pytest

from apsft_dagster.core.config import Sampling
from apsft_dagster.core.engines.base import GenerationRequest
from tests.tiny import tiny_snapshot

SAMPLINGS = [Sampling(temperature=1.0, top_p=0.95, top_k=0), Sampling(temperature=0.7, top_p=1.0, top_k=5),
             Sampling(temperature=1.3, top_p=0.8, top_k=20)]
MAX_NEW = 12  # tokens a request draws: past the stop ids planted at index 6, so rows end at different steps;
# each draw over the real 248,320 rows costs Hugging Face's one-at-a-time sampler a sort of the vocabulary


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from apsft_dagster.core.engines.transformers_engine import TransformersEngine

    path = tiny_snapshot(tmp_path_factory.mktemp("sampler") / "model", "qwen3_5", seed=3)
    engine = TransformersEngine.load(str(path), ["</think>"])
    # a random model over Qwen3.5's 248,320 rows almost never emits </think>: stop also on ids it did
    # draw, early, for every other request, so rows end at different steps under every sampling
    drawn = {c.token_ids[6] for sampling in SAMPLINGS for [c] in engine.generate(_requests(6, 17)[::2], sampling)}
    engine.stop_token_ids = engine.stop_token_ids + tuple(sorted(drawn))
    return engine


def _requests(count: int, seed0: int, n: int = 1) -> list[GenerationRequest]:
    """Prompts of different lengths (left padding differs per row), one seed each."""
    return [GenerationRequest(tuple(range(5, 5 + 3 + (7 * i) % 19)), n, MAX_NEW, seed0 + 1_000_003 * i)
            for i in range(count)]


@pytest.mark.slow
@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["harvest", "low-temperature-top-k", "hot-top-p"])
def test_batched_draws_equal_one_at_a_time(engine, sampling):
    requests = _requests(6, 17)
    batched = engine.generate(requests, sampling)
    alone = [engine.one_at_a_time(r, sampling) for r in requests]  # Hugging Face's sampler, torch.manual_seed(seed)
    assert batched == alone
    lengths = {len(c.token_ids) for [c] in batched}
    assert len(lengths) > 1 and {c.finish_reason for [c] in batched} == {"stop", "length"}
    assert len({c.token_ids for [c] in batched}) == len(requests)  # the seeds are not shared


@pytest.mark.slow
def test_multi_sample_requests_share_batches_and_draw_as_alone(engine):
    """A request's sample j draws alone from the seed `seed + j` (vLLM's rule for a request's
    children); several such requests fill one batch (Stage B's k samples per task)."""
    sampling = SAMPLINGS[0]
    requests = _requests(3, 7, n=4) + _requests(2, 3, n=1)
    engine_batch, engine.batch_size = engine.batch_size, 10  # 2 requests of 4, then one and the singles
    try:
        batched = engine.generate(requests, sampling)
    finally:
        engine.batch_size = engine_batch
    assert batched == [engine.one_at_a_time(r, sampling) for r in requests]
    assert [len(c) for c in batched] == [4] * 3 + [1] * 2


def test_row_batches_keep_requests_whole():
    from apsft_dagster.core.engines.transformers_engine import _row_batches

    assert _row_batches([4, 4, 4, 1, 1], 10) == [[0, 1], [2, 3, 4]]
    assert _row_batches([64, 64, 1], 128) == [[0, 1], [2]]
    assert _row_batches([200, 1], 128) == [[0], [1]]  # larger than a batch: alone, never split


@pytest.mark.slow
def test_a_request_draws_the_same_in_any_batch(engine):
    sampling = SAMPLINGS[0]
    requests = _requests(6, 99)
    full = engine.generate(requests, sampling)
    engine_batch, engine.batch_size = engine.batch_size, 3  # other batch boundaries and companions
    try:
        resumed = engine.generate(requests[2:][::-1], sampling)  # a resume re-issuing a subset, reordered
    finally:
        engine.batch_size = engine_batch
    assert resumed[::-1] == full[2:]


@pytest.mark.slow
def test_greedy_batches_are_untouched_by_the_sampler(engine):
    from apsft_dagster.core.engines.base import GREEDY

    requests = _requests(6, 5)
    assert engine.generate(requests, GREEDY) == [engine.one_at_a_time(r, GREEDY) for r in requests]


def test_the_sampler_refuses_greedy():
    from apsft_dagster.core.engines.seeded_sampler import SeededSampler

    with pytest.raises(ValueError, match="greedy"):
        SeededSampler([1], Sampling(temperature=0.0, top_p=1.0, top_k=0))


@pytest.mark.slow
@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["harvest", "low-temperature-top-k", "hot-top-p"])
def test_the_capability_checks_warpers_draw_what_hugging_faces_own_do(engine, sampling):
    """core/embedded/capability.py hands Hugging Face its warpers (top-p after top-k without the sort of
    the vocabulary) instead of the knobs: batched, every row draws the token Hugging Face's own would."""
    import torch

    from apsft_dagster.core.embedded.capability import complete

    tokenizer, model = engine.tokenizer, engine.model
    prompts = ["Add 2 and 3.", "Add 12 and 30, then double it.", "What is 7 times 6?"]
    ours = complete(model, tokenizer, prompts, MAX_NEW, sampling, seed=11)
    enc = tokenizer([f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n<think>\n" for p in prompts],
                    return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(11)
    out = model.generate(**enc, max_new_tokens=MAX_NEW, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, do_sample=True, temperature=sampling.temperature,
                         top_p=sampling.top_p, top_k=sampling.top_k)
    assert ours == tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=False)
