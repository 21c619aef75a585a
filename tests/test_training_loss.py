"""The weighted loss: token weights by segment, the reference NLL by hand, the chunked loss equal to it."""

import math

import pytest
import torch

from apsft_dagster.core.protocol import BOUNDARY, IM_END, format_answer, format_prompt
from apsft_dagster.core.training import chunked_nll, token_weights, weighted_nll


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from tiny import tiny_model

    return AutoTokenizer.from_pretrained(tiny_model(tmp_path_factory.mktemp("tiny"), 0))


def _starts(tokenizer, ids):
    """Each token's first character, found by decoding tokens one at a time (not by offsets)."""
    starts, at = [], 0
    for token in ids:
        starts.append(at)
        at += len(tokenizer.decode([token]))
    return starts, at


def test_token_weights_follow_the_segment_of_each_tokens_first_character(tokenizer):
    prompt, thought, answer = format_prompt("Add 1 and 2."), "1 + 2 = 3\n", format_answer("3")
    ids, weights = token_weights(tokenizer, prompt, thought, answer)
    text = prompt + thought + BOUNDARY + answer + IM_END
    assert ids == tokenizer(text, add_special_tokens=False)["input_ids"]  # tokenized once, whole
    starts, length = _starts(tokenizer, ids)
    assert length == len(text)
    a, b = len(prompt), len(prompt) + len(thought)
    expected = [0.0 if s < a else 0.5 if s < b else 1.0 for s in starts]
    assert weights == expected
    # by hand: the record opens in the prompt, the thought is weighted half, the end of turn is answer
    assert weights[0] == 0.0 and ids[-1] == tokenizer.convert_tokens_to_ids(IM_END) and weights[-1] == 1.0
    assert weights.count(0.5) >= 1 and ids[weights.index(1.0)] == tokenizer.convert_tokens_to_ids("</think>")
    assert weights == sorted(weights)  # prompt, then thought, then boundary + answer + end


def test_a_token_straddling_the_thought_and_boundary_counts_as_thought(tokenizer):
    """'\\n\\n' merges across seams: the token belongs to the segment of its first character."""
    prompt, thought = format_prompt("Add 1 and 2."), "3\n"
    ids, weights = token_weights(tokenizer, prompt, thought, format_answer("3"), end="")
    starts, _ = _starts(tokenizer, ids)
    seam = len(prompt) + len(thought)
    for s, w in zip(starts, weights):
        assert w == (0.0 if s < len(prompt) else 0.5 if s < seam else 1.0)


def test_weighted_nll_against_a_hand_computation():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 1.0], [0.0, 3.0, 0.0]])
    ids = torch.tensor([0, 2, 1])
    weights = torch.tensor([0.0, 0.5, 1.0])

    def nll(row, target):
        return -(row[target] - math.log(sum(math.exp(v) for v in row)))

    # t = 1 is predicted from logits[0], t = 2 from logits[1]; logits[2] predicts nothing
    want = 0.5 * nll([2.0, 0.0, -1.0], 2) + 1.0 * nll([0.5, 0.5, 1.0], 1)
    total, weight = weighted_nll(logits, ids, weights)
    assert total.item() == pytest.approx(want, rel=1e-6) and weight.item() == 1.5


def test_zero_weight_targets_get_zero_gradient():
    torch.manual_seed(0)
    logits = torch.randn(6, 9, requires_grad=True)
    ids = torch.randint(0, 9, (6,))
    weights = torch.tensor([0.0, 0.0, 0.0, 0.5, 0.5, 1.0])  # tokens 1, 2 are prompt: predicted from rows 0, 1
    total, _ = weighted_nll(logits, ids, weights)
    total.backward()
    assert torch.count_nonzero(logits.grad[:2]) == 0
    assert torch.all(logits.grad[2:5].abs().sum(dim=1) > 0)
    assert torch.count_nonzero(logits.grad[5]) == 0  # the last position predicts nothing


@pytest.mark.parametrize("chunk", [1, 5, 64])
def test_chunked_loss_and_gradients_equal_the_full_logits_reference(chunk):
    torch.manual_seed(1)
    T, H, V = 37, 8, 11
    hidden = torch.randn(T, H, requires_grad=True)  # float32, as the loss computes the head's logits
    head = torch.randn(V, H, requires_grad=True)
    ids = torch.randint(0, V, (T,))
    weights = torch.tensor([0.0] * 7 + [0.5] * 20 + [1.0] * 10)

    ref_total, ref_weight = weighted_nll(hidden @ head.T, ids, weights)
    ref_total.backward()
    ref_grads = hidden.grad.clone(), head.grad.clone()
    hidden.grad, head.grad = None, None

    total, weight, nll = chunked_nll(hidden, head, ids, weights, chunk)
    total.backward()
    assert weight.item() == ref_weight.item() == 6 * 0.0 + 20 * 0.5 + 10 * 1.0  # weights of t >= 1
    assert total.item() == pytest.approx(ref_total.item(), rel=1e-6)  # float32 sums in another order
    torch.testing.assert_close(hidden.grad, ref_grads[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(head.grad, ref_grads[1], rtol=1e-5, atol=1e-6)
    assert nll.shape == (T - 1,)


def test_the_window_loss_is_a_weighted_mean_not_a_mean_of_record_means():
    """Dividing each record's S by the window's total W before backward gives the gradient of
    sum(S) / sum(W); a mean of per-record means would weight a short record like a long one."""
    torch.manual_seed(2)
    head = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    records = [(torch.randn(n, 4, dtype=torch.float64), torch.randint(0, 7, (n,)), torch.rand(n, dtype=torch.float64))
               for n in (5, 19)]
    sums = [weighted_nll(h @ head.T, ids, w) for h, ids, w in records]
    window_weight = sum(float(w) for _, w in sums)
    for h, ids, w in records:  # the training loop's way: one backward per record
        total, _, _ = chunked_nll(h, head, ids, w, 3)
        (total / window_weight).backward()
    accumulated, head.grad = head.grad.clone(), None
    joint = sum(s for s, _ in sums) / sum(w for _, w in sums)
    joint.backward(retain_graph=True)
    torch.testing.assert_close(accumulated, head.grad)
    head.grad = None
    (sum(s / w for s, w in sums) / 2).backward()
    assert not torch.allclose(accumulated, head.grad)
