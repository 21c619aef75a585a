"""vLLM prompt-logprob scoring, against vLLM's documented offline API (CUDA, or CPU in .venv-vllm).

Prefix caching is off so every prompt is computed as given; it is a fast instrument and so is
used for bulk scoring only after the parity gate passes. The arithmetic (`prompt_logprob_sums`)
is pure and tested against a fake `vllm` module; the vLLM lane (tests/vllm_lane/) runs it for real.
"""

from __future__ import annotations

from collections.abc import Sequence

from apsft_dagster.core.config import Compute, Vllm
from apsft_dagster.core.engines.vllm_engine import llm_arguments, release_vllm_memory, snapshot_vocab, start_llm
from apsft_dagster.core.engines.vllm_memory import scoring_token_cap
from apsft_dagster.core.protocol import Spans
from apsft_dagster.core.text_protocol import active

# One prompt pass, no sampling that matters; `prompt_logprobs=1` still returns every prompt token's own logprob.
SCORING_PARAMS = {"max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 1}


class VllmInstrument:
    name = "fast"

    def __init__(self, path: str, compute: Compute, engine: Vllm):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        cap = device_token_cap(path, compute, engine)
        self.arguments = llm_arguments(path, compute, engine, max_num_batched_tokens=cap)
        self.llm, self.start_s, self.library_version = start_llm(path, compute, engine, self.arguments)
        self._owns_llm = True

    @classmethod
    def from_llm(cls, llm, tokenizer) -> VllmInstrument:
        """Score with an LLM built elsewhere (e.g. the generation engine's): it is borrowed, not owned."""
        instrument = cls.__new__(cls)
        instrument.llm, instrument.tokenizer, instrument._owns_llm, instrument.arguments = llm, tokenizer, False, {}
        return instrument

    def score(self, items: Sequence[tuple[str, str, str]]) -> list[dict]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        spans = [active().locate_spans(self.tokenizer, *item) for item in items]
        prompts = [TokensPrompt(prompt_token_ids=s.input_ids) for s in spans]
        outputs = self.llm.generate(prompts, SamplingParams(**SCORING_PARAMS), use_tqdm=False)
        return [prompt_logprob_sums(output.prompt_logprobs, s) for s, output in zip(spans, outputs)]

    def close(self) -> None:
        """Drop the LLM; tear down vLLM's state only if this instrument built it."""
        llm, self.llm = self.llm, None
        release_vllm_memory(llm, owned=self._owns_llm)


def device_token_cap(path: str, compute: Compute, engine: Vllm) -> int | None:
    """The instrument's `max_num_batched_tokens` on CUDA (`scoring_token_cap` of this device's
    total memory, as torch reports it, and the snapshot's vocabulary); None on CPU, where the KV
    cache is sized in bytes and vLLM's own default stands."""
    if compute.device != "cuda":
        return None
    import torch

    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return scoring_token_cap(total, engine.gpu_memory_utilization, snapshot_vocab(path), engine.in_process)


def prompt_logprob_sums(prompt_logprobs: Sequence, spans: Spans) -> dict:
    """score_trace's sums from vLLM's `RequestOutput.prompt_logprobs`.

    Entry i is a dict token id -> Logprob for prompt token i given tokens before it (entry 0 is
    None: nothing predicts the first token); the prompt's own token is always in it. Answer
    tokens are `spans.answer`, joint tokens the boundary's and the answer's.
    """
    ids = spans.input_ids
    if len(prompt_logprobs) != len(ids) or spans.boundary.start < 1:
        raise ValueError(f"prompt_logprobs has {len(prompt_logprobs)} entries for {len(ids)} prompt tokens "
                         f"(boundary at {spans.boundary.start}); expected one per token, the boundary after the first")

    def total(positions: range) -> float:
        return float(sum(prompt_logprobs[i][ids[i]].logprob for i in positions))

    joint = range(spans.boundary.start, spans.answer.stop)
    return {"answer_logprob": total(spans.answer), "joint_logprob": total(joint),
            "n_answer_tokens": len(spans.answer), "n_joint_tokens": len(joint)}
