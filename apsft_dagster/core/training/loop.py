"""LoRA training of one policy: seeded, resumable, with the weighted window loss (loss.py).

Seeding: the training seed is set before the base model loads and again immediately before the
adapter is created, so every arm starts from the same initial adapter (its digest is recorded).
Each optimizer step accumulates one window of records (records.windows): each record's weighted
sum S is divided by the window's total weight W before backward, so the step's gradient is that
of sum(S) / sum(W). Every `checkpoint_every` steps the adapter, optimizer, scheduler and RNG
states go to the store; a rerun resumes from the last checkpoint.

Dtypes (CPU float32: every weight and activation float32, no autocast, the reference bits):
- the frozen base: NF4 with bitsandbytes' compute dtype `compute.dtype` (bf16) where
  `compute.quantization: nf4`, else `compute.dtype`; its unquantized weights (the tied 248,320 x
  2,560 embedding, norms, conv, A_log) stay in `compute.dtype`, as scoring and serving run them.
  peft's `prepare_model_for_kbit_training` is not called: besides freezing (done here) it casts every
  bf16/fp16 non-4-bit weight to fp32, and with no option to skip that; bitsandbytes' Linear4bit
  returns its input's dtype, so an fp32 embedding made the whole residual stream fp32 (~2x its memory)
  and the tied head's loss matmuls fp32.
- the LoRA A/B weights: fp32 (peft's get_peft_model upcasts bf16 adapters by default), AdamW's
  master copy: bf16 spaces values near A's initial scale (~0.02 at hidden 2,560) 7.8e-5 apart, so
  steps of at most ~2e-4, shrinking to 0 with the linear schedule, would round coarsely, then away.
- activations: the decoder runs under `compute_context`, autocast to `compute.dtype` (bf16) on
  CUDA, so every matmul, LoRA's included, runs in bf16 (without it peft casts LoRA's input to the
  fp32 adapter dtype); the loss stays outside it, fp32 from bf16 logits (loss.py `chunked_nll`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import torch

from apsft_dagster.core.config import Compute, Training
from apsft_dagster.core.errors import TrainingError
from apsft_dagster.core.progress import Pace, Throttle
from apsft_dagster.core.training.checkpoint import Checkpoints
from apsft_dagster.core.training.lora import (
    adapter_state,
    lora_config,
    lora_pairs,
    quiet_peft,
    state_digest,
    target_modules,
)
from apsft_dagster.core.training.loss import SEGMENT_NAMES, chunked_nll
from apsft_dagster.core.training.records import Example


def seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    torch.manual_seed(seed)  # CPU and every CUDA device


def load_base(path: str, compute: Compute):
    """The frozen base on the profile's device: float32 on CPU, the compute dtype on CUDA, 4-bit
    NF4 (QLoRA) only where CUDA is present and `compute.quantization` asks for it; no weight is
    upcast (the module's dtypes)."""
    from transformers import AutoModelForCausalLM

    from apsft_dagster.core.engines.transformers_engine import torch_dtype

    dtype = torch_dtype(compute.dtype)
    if compute.quantization == "nf4":
        if not torch.cuda.is_available():
            raise TrainingError("compute.quantization nf4 needs a CUDA device; use compute.quantization: none on CPU")
        try:
            import bitsandbytes  # noqa: F401
            from transformers import BitsAndBytesConfig
        except ImportError:
            raise TrainingError("compute.quantization nf4 needs bitsandbytes: pip install bitsandbytes "
                                "(or set compute.quantization: none to train on the bf16 base)") from None
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                   bnb_4bit_compute_dtype=dtype)
        model = AutoModelForCausalLM.from_pretrained(path, quantization_config=quant, dtype=dtype, device_map={"": 0})
        model.requires_grad_(False)  # prepare_model_for_kbit_training less its fp32 upcast (module docstring)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(compute.device)
    model.config.use_cache = False
    return model


def base_weights(compute: Compute) -> str:
    return f"nf4 4-bit base (QLoRA, compute {compute.dtype})" if compute.quantization == "nf4" \
        else f"{compute.dtype} base on {compute.device}"


def attach_adapter(model, training: Training, seed: int):
    """(peft model, targets, expected pairs, initial adapter digest), the seed reset just before."""
    from peft import get_peft_model

    targets, expected = target_modules(model, training)
    seed_everything(seed)
    with quiet_peft():
        peft_model = get_peft_model(model, lora_config(training.lora, targets))
    pairs = lora_pairs(peft_model)
    if len(pairs) != expected:
        raise TrainingError(f"{len(pairs)} LoRA pairs were created, expected {expected} (every linear projection "
                            "of the decoder blocks)")
    if training.gradient_checkpointing:
        # transformers 5.24 renamed it (the old name warns); the GPU lock's 5.19 has only the old one
        if hasattr(peft_model, "activation_checkpointing_enable"):
            peft_model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            peft_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        peft_model.enable_input_require_grads()
    return peft_model, targets, expected, state_digest(adapter_state(peft_model))


def compute_context(device_type: str, dtype: torch.dtype | None):
    """The training forward's autocast: to the base's load dtype where it is below float32 (bf16 on
    CUDA), on `device_type`; on float32 (CPU) nothing at all, so the reference path's bits stay."""
    if dtype in (None, torch.float32):
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=dtype)


def record_loss(model, example: Example, chunk: int) -> tuple[torch.Tensor, float, torch.Tensor]:
    """(weighted sum S with grad, weight W, per-token nll of t >= 1) of one record: the decoder
    under `compute_context` (the dtype load_base loaded, config.dtype), the loss in fp32 outside it."""
    base = model.get_base_model()
    device = next(p.device for p in model.parameters())
    ids = torch.tensor(example.input_ids, device=device)
    with compute_context(device.type, base.config.dtype):
        hidden = base.get_decoder()(input_ids=ids[None], use_cache=False).last_hidden_state[0]
    head = base.get_output_embeddings().weight
    weights = torch.tensor(example.weights, device=device)
    total, weight, nll = chunked_nll(hidden, head, ids, weights, chunk)
    return total, float(weight), nll


def measure_throughput(model, examples: list[Example], training: Training) -> float:
    """Steady-state tokens per second of forward + backward (no optimizer step; grads dropped):
    each record once untimed (first-step setup, allocation), then each timed on its own, and the
    median of the records' rates, so neither a slow first step nor one preempted step moves it."""
    model.train()
    rates = []
    for timed in (False, True):
        for ex in examples:
            started = time.perf_counter()
            total, weight, _ = record_loss(model, ex, training.loss_chunk_tokens)
            (total / max(weight, 1e-12)).backward()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            if timed:
                rates.append(len(ex.input_ids) / max(time.perf_counter() - started, 1e-9))
    model.zero_grad(set_to_none=True)
    rates.sort()
    middle = len(rates) // 2
    return rates[middle] if len(rates) % 2 else (rates[middle - 1] + rates[middle]) / 2


def train(model, examples: list[Example], windows: list[list[int]], training: Training, *, initial_digest: str,
          identity: str, checkpoints: Checkpoints, log: Callable[[str], None] = print) -> tuple[int, list[dict], int]:
    """Run the optimizer steps on an adapted model; returns (steps, curve, resumed_from).

    `identity` names what is trained (data, settings, seed): a checkpoint with another identity
    is discarded, never resumed.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=training.learning_rate, weight_decay=0.0)
    total_steps = len(windows)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 - s / total_steps)  # linear to 0
    step, curve = 0, []
    saved = checkpoints.load()
    if saved is not None and saved[1]["identity"] != identity:
        log(f"checkpoint {checkpoints.name} belongs to another training ({saved[1]['identity'][:12]}); discarded")
        checkpoints.clear()
        saved = None
    if saved is not None:
        from peft import set_peft_model_state_dict

        state, progress = saved
        set_peft_model_state_dict(model, state["adapter"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"]["cpu"])
        if torch.cuda.is_available() and state["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        step, curve = progress["step"], progress["curve"]
        log(f"resumed at optimizer step {step}/{total_steps} from {checkpoints.name}")
    resumed_from = step
    model.train()
    throttle, pace = Throttle(), Pace(total_steps - step, "steps")  # each tenth, and each half minute
    while step < total_steps:
        curve.append(_step(model, [examples[i] for i in windows[step]], training, optimizer, params))
        curve[-1].update(step=step + 1, lr=scheduler.get_last_lr()[0])
        scheduler.step()
        step += 1
        line = f"step {step}/{total_steps} loss {curve[-1]['loss']:.4f}{pace.step(worked=True)}"
        if throttle.due(line):
            log(line)
        if step % training.checkpoint_every == 0 and step < total_steps:
            checkpoints.save(_state(model, optimizer, scheduler), {"step": step, "curve": curve, "identity": identity,
                                                                   "initial_digest": initial_digest})
    return step, curve, resumed_from


def _step(model, window: list[Example], training: Training, optimizer, params) -> dict:
    """One optimizer step over a window; the curve point: window loss and each segment's mean nll."""
    window_weight = sum(ex.predicted_weight for ex in window)
    loss_sum, seg_sum, seg_n, tokens = 0.0, [0.0] * 3, [0] * 3, 0
    for ex in window:
        total, _, nll = record_loss(model, ex, training.loss_chunk_tokens)
        (total / window_weight).backward()
        loss_sum += float(total.detach())
        segments = torch.tensor(ex.segments[1:], device=nll.device)
        for s in range(3):
            mask = segments == s
            seg_sum[s] += float(nll[mask].double().sum())
            seg_n[s] += int(mask.sum())
        tokens += len(ex.input_ids)
    torch.nn.utils.clip_grad_norm_(params, training.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    point = {"loss": loss_sum / window_weight, "records": len(window), "tokens": tokens}
    point.update({name: (seg_sum[s] / seg_n[s] if seg_n[s] else None) for s, name in enumerate(SEGMENT_NAMES)})
    return point


def _state(model, optimizer, scheduler) -> dict:
    rng = {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
    return {"adapter": adapter_state(model), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "rng": rng}
