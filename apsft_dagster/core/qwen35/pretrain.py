"""Pretraining the embedded recipe on Qwen3.5's real vocabulary, exactly, at the cost of the rows it uses.

A model over all 248,320 rows, trained as the embedded build trains (core/embedded/model.py), would
put every position through the whole LM head: about 80x the smoke build's cost on a CPU. But the
corpus uses a few thousand ids. The LM head's rows of every other id are set to zero, so their
logits are exactly 0 whatever the hidden state, and the softmax over the whole vocabulary is the
softmax over the used rows plus one term for the rest, log(rows - used), since each of them adds
exp(0) = 1 to the partition sum. That is the loss `UsedRowsLoss` computes, with Hugging Face's
causal-LM shift and mean. A zero row would get no gradient and AdamW's decay keeps zero at zero, so
only the used rows train, as compact parameters (the optimizer never walks the full tensors),
folded back when pretraining ends: the saved model is an ordinary snapshot over 248,320 rows whose
unused ids score exactly 0. Their embedding rows are zero too: never an input in pretraining.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from types import SimpleNamespace

import torch

from apsft_dagster.core.protocol import SPECIAL_TOKENS

IGNORE = -100


def real_vocabulary():
    """(Qwen3.5's tokenizer, the real snapshot's embedding rows)."""
    from apsft_dagster.core.qwen35.tokenizer import embedding_rows, load_qwen35_tokenizer

    return load_qwen35_tokenizer(), embedding_rows()


def used_ids(examples: Iterable[tuple[list[int], list[int]]], tokenizer) -> list[int]:
    """Every id the corpus holds, and the protocol's markers (pad included), ascending."""
    found = {i for ids, _ in examples for i in ids}
    return sorted(found | set(tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS))))


class UsedRowsLoss(torch.nn.Module):
    """`causal`'s next-token loss over its whole vocabulary, computed on the `used` rows. The used rows
    of the embedding and the LM head train as compact parameters (the full tensors are frozen, so the
    optimizer never walks the 248,320 rows); `fold()` writes them back, every other row zero.
    `pretrain` trains this module as it trains a causal LM: `model(...).loss`."""

    def __init__(self, causal, used: Sequence[int]):
        super().__init__()
        self.causal = causal
        embedding, head = causal.get_input_embeddings().weight, causal.lm_head.weight
        rows = head.shape[0]
        self.register_buffer("used", torch.tensor(list(used)), persistent=False)
        compact = torch.full((rows,), IGNORE)
        compact[self.used] = torch.arange(len(used))
        self.register_buffer("compact", compact, persistent=False)
        self.rest = math.log(rows - len(used))  # the zero rows' share of the partition sum
        self.embed = torch.nn.Parameter(embedding.detach()[self.used].clone())
        self.tied = head is embedding
        self.head = self.embed if self.tied else torch.nn.Parameter(head.detach()[self.used].clone())
        embedding.requires_grad_(False)
        head.requires_grad_(False)

    def forward(self, input_ids, attention_mask, labels):
        embeds = self.embed[self.compact[input_ids]]
        hidden = self.causal.model(inputs_embeds=embeds, attention_mask=attention_mask).last_hidden_state
        logits = hidden[:, :-1] @ self.head.T
        logits = torch.cat([logits, torch.full_like(logits[..., :1], self.rest)], dim=-1)
        targets = labels[:, 1:]
        targets = torch.where(targets == IGNORE, IGNORE, self.compact[targets.clamp(min=0)])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                                 ignore_index=IGNORE)
        return SimpleNamespace(loss=loss)

    @torch.no_grad()
    def fold(self) -> None:
        """The trained rows into the model's own tensors, every unused row zero: an ordinary snapshot."""
        for full, rows in ((self.causal.get_input_embeddings().weight, self.embed),
                           (self.causal.lm_head.weight, self.head)):
            full.zero_()
            full[self.used] = rows
            full.requires_grad_(True)
