"""The engine's decoding loop (core/engines/decode.py): closed rows leave the batch, and every row
still draws what Hugging Face's own `generate` draws for it alone, on both layouts."""

import pytest

from apsft_dagster.core.config import Sampling
from apsft_dagster.core.engines.base import GREEDY, GenerationRequest
from tests.tiny import tiny_model, tiny_snapshot

HARVEST = Sampling(temperature=1.0, top_p=0.95, top_k=20)
MAX_NEW = 10


@pytest.fixture(scope="module", params=["qwen3", "qwen3_5"])
def engine(request, tmp_path_factory):
    from apsft_dagster.core.engines.transformers_engine import TransformersEngine

    root = tmp_path_factory.mktemp(f"decode-{request.param}")
    path = (tiny_model(root / "model", seed=5, layers=2) if request.param == "qwen3" else
            str(tiny_snapshot(root / "model", "qwen3_5", seed=4, layers=4)))
    engine = TransformersEngine.load(path, ["</think>"])
    # random weights seldom emit </think>: stop also on ids the rows drew at steps 2 and 5, so
    # rows (and rows of one request) close at different steps
    first = engine.generate(_requests(), HARVEST)
    engine.stop_token_ids += tuple(sorted({c.token_ids[i] for cs in first for c in cs[:2] for i in (2, 5)}))
    return engine


def _requests(n: int = 4) -> list[GenerationRequest]:
    """Three requests of `n` samples and two single ones, prompts of different lengths."""
    return [GenerationRequest(tuple(range(7, 10 + 5 * i)), n if i < 3 else 1, MAX_NEW, 31 + 7_919 * i)
            for i in range(5)]


def _forward_batches(model) -> tuple[list[int], object]:
    """Rows in each forward call, recorded by a hook (the first call is the prefill)."""
    sizes: list[int] = []
    handle = model.register_forward_pre_hook(lambda _m, _a, kw: sizes.append(len(kw["input_ids"])),
                                             with_kwargs=True)
    return sizes, handle


@pytest.mark.parametrize("sampling", [HARVEST, GREEDY], ids=["sampled", "greedy"])
def test_rows_draw_what_generate_draws_alone(engine, sampling):
    requests = _requests(4 if sampling is HARVEST else 1)  # greedy draws one sample a request
    batched = engine.generate(requests, sampling)
    assert batched == [engine.one_at_a_time(r, sampling) for r in requests]
    if sampling is HARVEST:  # rows of one request closed at different steps, and some ran to the end
        assert any(len({len(c.token_ids) for c in cs}) > 1 for cs in batched)
        assert {c.finish_reason for cs in batched for c in cs} == {"stop", "length"}


def test_closed_rows_leave_the_batch(engine):
    requests = _requests()
    sizes, handle = _forward_batches(engine.model)
    try:
        completions = [c for cs in engine.generate(requests, HARVEST) for c in cs]
    finally:
        handle.remove()
    lengths = [len(c.token_ids) for c in completions]
    # the step after a row's k-th token runs only the rows longer than k
    expected = [len(lengths)] + [sum(n > k for n in lengths) for k in range(1, max(lengths))]
    assert sizes == expected
    assert sizes[-1] < sizes[0]  # some row did close early, so the batch shrank


def test_a_closed_row_draws_nothing_and_each_sample_draws_alone(engine, monkeypatch):
    """One draw a step per open row, never one for a request's closed rows (over Qwen3.5's 248,320
    ids a draw is the tail's cost); sample j of a request seeded s is the one-sample request s + j."""
    import torch

    requests, drawn, multinomial = _requests(), [], torch.multinomial
    monkeypatch.setattr(torch, "multinomial", lambda probs, *a, **kw: drawn.append(len(probs)) or multinomial(
        probs, *a, **kw))
    completions = [c for cs in engine.generate(requests, HARVEST) for c in cs]
    monkeypatch.undo()
    assert drawn == [1] * sum(len(c.token_ids) for c in completions)
    singles = [GenerationRequest(r.prompt_ids, 1, r.max_tokens, seed) for r in requests for seed in r.sample_seeds()]
    assert [c for [c] in engine.generate(singles, HARVEST)] == completions


def test_rows_drawn_on_two_threads_draw_what_generate_draws_alone(engine, monkeypatch):
    """With threads to spare (full_cpu's 2) the open rows draw in a pool, a share each: every token is
    still the one its own generator draws (Hugging Face's `generate` on the sample alone)."""
    import threading

    import torch

    requests, hands, threads = _requests(), [], torch.get_num_threads()
    from apsft_dagster.core.engines import decode

    draw_init = decode.SeededDraw.__init__

    def recording(self, *a, **kw):
        draw_init(self, *a, **kw)
        warpers = self.warpers
        self.warpers = lambda ids, scores: hands.append(threading.current_thread().name) or warpers(ids, scores)
    monkeypatch.setattr(decode.SeededDraw, "__init__", recording)
    torch.set_num_threads(2)
    try:
        pooled = engine.generate(requests, HARVEST)
    finally:
        torch.set_num_threads(threads)
    monkeypatch.undo()
    assert pooled == [engine.one_at_a_time(r, HARVEST) for r in requests]
    assert len({name for name in hands if name.startswith("apsft-draw")}) == 2  # both hands drew


def test_a_long_batch_pulses_its_steps_and_open_rows_through_a_listening_stage(engine, monkeypatch):
    """Within `pulsing`, a decoding batch says each step's open rows (each half minute; here, with
    `every` 0, each step): a stage whose one item is one long batch still shows progress in a log."""
    from apsft_dagster.core import progress

    requests = _requests()
    monkeypatch.setattr(progress.Pulse, "every", 0.0)
    lines: list[str] = []
    with progress.pulsing(lines.append):
        lengths = [len(c.token_ids) for cs in engine.generate(requests, HARVEST) for c in cs]
    # one batch of every row; a row draws at step k while it has k tokens or more
    assert lines == [f"decoding {len(lengths)} rows: step {k}/{MAX_NEW}, {sum(n >= k for n in lengths)} open"
                     for k in range(1, max(lengths) + 1)]
    assert len(set(lines)) > 1 and min(lengths) < max(lengths)  # rows closed at different steps


def test_a_draw_needs_a_temperature():
    from apsft_dagster.core.engines.decode import SeededDraw

    with pytest.raises(ValueError, match="greedy"):
        SeededDraw([1], GREEDY)
