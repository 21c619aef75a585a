"""score_trace against brute force; the batched instrument; gains as differences of two passes."""

import pytest
import torch
from tokenizers import Tokenizer, decoders, models
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from apsft_dagster.core.embedded.tokenizer import train_tokenizer
from apsft_dagster.core.instruments import BatchedInstrument, ReferenceInstrument
from apsft_dagster.core.protocol import BOUNDARY, SPECIAL_TOKENS, format_answer, format_prompt, format_record
from apsft_dagster.core.scoring import score_trace, with_gains

CASES = [("Add 3 and 4.", "Step: 3 + 4 = 7.\n", "7"), ("Add 12 and 9.", "Step: 12 + 9 = 21.\nCheck: 21.\n", "21"),
         ("Add 5 and 5.", "", "10"), ("Add 1 and 0.", "1 + 0 = 1.\n", "1")]


@pytest.fixture(scope="module")
def qwen():
    texts = [format_record(f"Add {i} and {j}.", f"Step: {i} + {j} = {i + j}.\n", str(i + j))
             for i in range(20) for j in range(20)]
    tok = train_tokenizer(texts, vocab_size=300)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         head_dim=16, tie_word_embeddings=True))
    return model.eval(), tok


@pytest.fixture(scope="module")
def llama():
    """Another architecture and a hand-made character tokenizer: score_trace is not tied to ours."""
    chars = sorted(set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 :.+=\n|<>/_"))
    raw = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(chars)}, merges=[]))
    raw.decoder = decoders.Fuse()
    raw.add_special_tokens(list(SPECIAL_TOKENS))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    torch.manual_seed(1)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2))
    return model.eval(), tok


def brute_force(model, tok, prompt, thought, answer):
    """Full logits at every position, token by token; spans from this test's own offset reading."""
    text = prompt + thought + BOUNDARY + answer
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    with torch.no_grad():
        logprobs = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), dim=-1)
    answer_at, boundary_at = len(text) - len(answer), len(prompt + thought)
    answer_lp = joint_lp = 0.0
    n_answer = n_joint = 0
    for i in range(1, len(ids)):
        lp = float(logprobs[i - 1, ids[i]])
        start = enc["offset_mapping"][i][0]
        if start >= boundary_at:
            joint_lp, n_joint = joint_lp + lp, n_joint + 1
        if start >= answer_at:
            answer_lp, n_answer = answer_lp + lp, n_answer + 1
    return answer_lp, joint_lp, n_answer, n_joint


@pytest.mark.parametrize("fixture", ["qwen", "llama"])
def test_score_trace_equals_brute_force(fixture, request):
    model, tok = request.getfixturevalue(fixture)
    for prompt, thought, answer in CASES:
        x, y = format_prompt(prompt), format_answer(answer)
        got = score_trace(model, tok, x, thought, y)
        a, j, na, nj = brute_force(model, tok, x, thought, y)
        assert (got["n_answer_tokens"], got["n_joint_tokens"]) == (na, nj)
        assert got["answer_logprob"] == pytest.approx(a, abs=1e-4)
        assert got["joint_logprob"] == pytest.approx(j, abs=1e-4)
        assert nj > na > 0


def test_gains_are_differences_of_two_passes(qwen):
    model, tok = qwen
    x, thought, y = format_prompt("Add 3 and 4."), "Step: 3 + 4 = 7.\n", format_answer("7")
    a_z, j_z, na, nj = brute_force(model, tok, x, thought, y)
    a_0, j_0, na0, nj0 = brute_force(model, tok, x, "", y)
    row = with_gains(score_trace(model, tok, x, thought, y), score_trace(model, tok, x, "", y))
    assert row["answer_gain"] == pytest.approx(a_z / na - a_0 / na0, abs=1e-4)
    assert row["joint_gain"] == pytest.approx(j_z / nj - j_0 / nj0, abs=1e-4)
    assert row["answer_gain_sum"] == pytest.approx(a_z - a_0, abs=1e-4)
    assert row["empty_joint_mean"] == pytest.approx(j_0 / nj0, abs=1e-4)


def test_batched_instrument_matches_reference_on_cpu(qwen):
    model, tok = qwen
    items = [(format_prompt(p), t, format_answer(a)) for p, t, a in CASES] * 2
    reference = ReferenceInstrument(model, tok).score(items)
    batched = BatchedInstrument(model, tok, batch_size=3).score(items)
    for r, b in zip(reference, batched):
        assert (r["n_answer_tokens"], r["n_joint_tokens"]) == (b["n_answer_tokens"], b["n_joint_tokens"])
        assert b["answer_logprob"] == pytest.approx(r["answer_logprob"], abs=1e-4)
        assert b["joint_logprob"] == pytest.approx(r["joint_logprob"], abs=1e-4)


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    """The embedded layout (Qwen3.5: linear-attention layers, whose chunked recurrence pads to 64)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.tiny import tiny_snapshot

    path = tiny_snapshot(tmp_path_factory.mktemp("hybrid") / "model", "qwen3_5", seed=1)
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["qwen", "llama", "hybrid"])
@pytest.mark.parametrize("batch_tokens", [1, 300, 8192])
def test_score_traces_batches_the_computation_of_one(fixture, batch_tokens, request):
    """Records of many lengths (0-150 thought characters), batched by length with right padding:
    each equals score_trace alone (batch of one, no padding) to float summation order, and brute force."""
    import random

    from apsft_dagster.core.scoring import score_traces

    model, tok = request.getfixturevalue(fixture)
    rng = random.Random(5)
    items = [(format_prompt(f"Add {i} and {i + 1}."), "".join(rng.choice("0123456789 +=.\n") for _ in
                                                           range(rng.randint(0, 150))), format_answer(str(i)))
             for i in range(24)]
    got = score_traces(model, tok, items, batch_tokens)
    for item, g in zip(items, got):
        alone = score_trace(model, tok, *item)
        assert (g["n_answer_tokens"], g["n_joint_tokens"]) == (alone["n_answer_tokens"], alone["n_joint_tokens"])
        assert g["joint_logprob"] == pytest.approx(alone["joint_logprob"], abs=1e-5)
        assert g["answer_logprob"] == pytest.approx(alone["answer_logprob"], abs=1e-5)
    a, j, _, _ = brute_force(model, tok, *items[7])
    assert got[7]["joint_logprob"] == pytest.approx(j, abs=1e-4)
    assert got[7]["answer_logprob"] == pytest.approx(a, abs=1e-4)
    if batch_tokens == 1:  # a batch of one is score_trace exactly
        assert got == [score_trace(model, tok, *item) for item in items]
