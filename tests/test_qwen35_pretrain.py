"""Pretraining on Qwen3.5's real vocabulary at the cost of the rows it uses (core/qwen35/pretrain.py):
the compact loss equals the whole-vocabulary cross-entropy of the folded model, computed here by
brute force in float64 over all 248,320 rows, and folding leaves an ordinary model whose unused
rows are zero (so their logits are exactly 0) and whose used rows are the trained ones."""

import pytest
import torch

from apsft_dagster.core.qwen35.pretrain import UsedRowsLoss
from tiny import tiny_snapshot


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    return tiny_snapshot(tmp_path_factory.mktemp("used") / "model", "qwen3_5", layers=2, seed=5)


def _brute_force(model, ids, labels) -> float:
    """Mean next-token NLL over the whole vocabulary, float64, Hugging Face's shift and ignore rule."""
    model = model.double()
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1]
    logprobs = torch.log_softmax(logits, dim=-1)
    targets, keep = labels[:, 1:], labels[:, 1:] != -100
    picked = logprobs.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    return float(-(picked * keep).sum() / keep.sum())


def test_the_compact_loss_is_the_whole_vocabulary_loss_and_training_folds_back(snapshot):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(snapshot)
    used = sorted({*range(200, 700), 248044, 248045, 248046, 248068, 248069})
    ids = torch.tensor([[248045, 210, 333, 248068, 450, 451, 248069, 640, 248046],
                        [248045, 220, 230, 248068, 260, 248069, 270, 248046, 248044]])
    labels = ids.masked_fill(ids == 248044, -100)
    labels[:, :3] = -100  # the prompt, as the embedded build masks it
    loss = UsedRowsLoss(model, used)
    optimizer = torch.optim.AdamW(loss.parameters(), lr=1e-2, weight_decay=0.01)
    for _ in range(3):
        value = loss(ids, torch.ones_like(ids), labels).loss
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
    with torch.no_grad():
        before_fold = float(loss(ids, torch.ones_like(ids), labels).loss)
    loss.fold()
    unused = torch.ones(model.lm_head.weight.shape[0], dtype=torch.bool)
    unused[used] = False
    assert model.lm_head.weight.shape[0] == 248320 and not model.lm_head.weight[unused].any()
    assert not model.get_input_embeddings().weight[unused].any()
    assert torch.equal(model.lm_head.weight[used], loss.head.detach())
    assert before_fold == pytest.approx(_brute_force(model, ids, labels), abs=2e-5)
