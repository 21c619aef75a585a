"""Scoring instruments behind one interface: `score(items) -> [dict]` with score_trace's keys.

- ReferenceInstrument: `score_trace`'s computation, the instrument of record. `batch_tokens=None`: one
  record per forward, no padding (the registered instrument: `full`); a number: many records per forward
  (`score_traces`: right padding, no mask, records of similar length together; smoke's project choice,
  `scoring.reference_batch_tokens`, docs/PROTOCOL.md section 6).
- BatchedInstrument: left-padded batches with explicit position ids; allowed for bulk scoring only
  after the parity gate passes (batch-sensitive numerics are exactly what the gate measures).
- The vLLM prompt-logprob instrument lives in `engines/vllm_scoring.py` (CUDA vLLM or CPU vLLM in
  .venv-vllm, lazy import).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from apsft_dagster.core.scoring import score_trace, score_traces
from apsft_dagster.core.text_protocol import active

Item = tuple[str, str, str]  # (formatted prompt, thought, answer with its leading space)


class ReferenceInstrument:
    name = "reference"

    def __init__(self, model, tokenizer, batch_tokens: int | None = None):
        self.model, self.tokenizer, self.batch_tokens = model, tokenizer, batch_tokens

    def score(self, items: Sequence[Item]) -> list[dict]:
        if self.batch_tokens is None:  # single context, batch of one, no padding
            return [score_trace(self.model, self.tokenizer, *item) for item in items]
        return score_traces(self.model, self.tokenizer, items, self.batch_tokens)


class BatchedInstrument:
    name = "fast"

    def __init__(self, model, tokenizer, batch_size: int = 16):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size

    @torch.no_grad()
    def score(self, items: Sequence[Item]) -> list[dict]:
        spans = [active().locate_spans(self.tokenizer, *item) for item in items]
        out = []
        for start in range(0, len(spans), self.batch_size):
            out += self._batch(spans[start:start + self.batch_size])
        return out

    def _batch(self, spans) -> list[dict]:
        width = max(len(s.input_ids) for s in spans)
        ids = torch.full((len(spans), width), self.tokenizer.pad_token_id, device=self.model.device)
        mask = torch.zeros_like(ids)
        for row, s in enumerate(spans):  # left padding: every row's joint tokens end at the last column
            ids[row, width - len(s.input_ids):] = torch.tensor(s.input_ids)
            mask[row, width - len(s.input_ids):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        keep = max(len(s.input_ids) - s.boundary.start for s in spans) + 1
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
        logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # column j predicts token width-keep+1+j
        results = []
        for row, s in enumerate(spans):
            n_joint = len(s.input_ids) - s.boundary.start
            targets = ids[row, width - n_joint:]
            picked = logprobs[row, keep - 1 - n_joint:].gather(1, targets[:, None])[:, 0].double()
            results.append({"answer_logprob": float(picked[n_joint - len(s.answer):].sum()),
                            "joint_logprob": float(picked.sum()),
                            "n_answer_tokens": len(s.answer), "n_joint_tokens": n_joint})
        return results
