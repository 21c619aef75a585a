"""vLLM prompt-logprob scoring (GPU only), against vLLM's documented offline API; not executed here.

Prefix caching is off so every prompt is computed as given; it is a fast instrument and so is
used for bulk scoring only after the parity gate passes.
"""

from __future__ import annotations

from collections.abc import Sequence

from apsft_dagster.core.protocol import locate_spans


class VllmInstrument:
    name = "fast"

    def __init__(self, path: str, dtype: str = "bfloat16", max_model_len: int | None = None):
        from transformers import AutoTokenizer
        from vllm import LLM  # lazy: GPU extra only

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.llm = LLM(model=path, tokenizer=path, dtype=dtype, max_model_len=max_model_len,
                       enable_prefix_caching=False)

    def score(self, items: Sequence[tuple[str, str, str]]) -> list[dict]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        spans = [locate_spans(self.tokenizer, *item) for item in items]
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=s.input_ids) for s in spans], params, use_tqdm=False)
        results = []
        for s, output in zip(spans, outputs):
            # prompt_logprobs[i] maps token id -> Logprob for position i; the prompt's own token is always present
            joint = [output.prompt_logprobs[i][s.input_ids[i]].logprob for i in range(s.boundary.start, len(s.input_ids))]
            results.append({"answer_logprob": float(sum(joint[len(joint) - len(s.answer):])),
                            "joint_logprob": float(sum(joint)),
                            "n_answer_tokens": len(s.answer), "n_joint_tokens": len(joint)})
        return results
