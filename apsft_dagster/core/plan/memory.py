"""Each engine stage's GPU memory before the run (`apsft plan --gpu h100|h200`, docs/experiment.md
"The plan"): what is resident, what vLLM needs free to start, the largest transient step, and
whether the stage fits. Arithmetic only, from the snapshot's config.json (no torch).

Parameters are counted from the config as Transformers builds the model (the registered
Qwen3.5-4B: 4,205,751,296 in the text model that every stage loads, 333,514,240 in the vision
tower, which `AutoModelForCausalLM` and vLLM's `language_model_only` leave out; tests check both
against Transformers on the meta device). vLLM's reservation, headroom and prompt log-prob bytes:
core/engines/vllm_memory.py. Training's activations are an estimate (gradient checkpointing keeps
one hidden state per layer; one layer is recomputed at a time; the loss's LM-head chunk).
"""

from __future__ import annotations

import json

from apsft_dagster.core.engines.vllm_memory import (
    GIB,
    contexts,
    headroom,
    logprob_step_bytes,
    reservation,
    scoring_token_cap,
)
from apsft_dagster.core.errors import DeviceError
from apsft_dagster.core.paths import CONFIG_DIR, PROJECT_ROOT, local_model_dir
from apsft_dagster.core.snapshot import text_config
from apsft_dagster.core.training.lora import architecture_key

# torch.cuda.get_device_properties(0).total_memory, as OOM messages print it ("GPU 0 has a total
# capacity of ... GiB"): H100 80GB HBM3 79.11-79.33 GiB in public reports (79.19 taken), H200 139.80 GiB.
GPUS = {"h100": 79.19, "h200": 139.80}
REGISTERED_CONFIG = CONFIG_DIR / "models" / "qwen3_5_4b.config.json"
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
NF4_BYTES = (4 + 8 / 64 + 32 / (64 * 256)) / 8  # 4-bit codes, a double-quantized absmax per 64 weights
LORA_STATE_BYTES = 4 + 4 + 8  # float32 weight, gradient and Adam's two moments
LOSS_BYTES = 2 + 4 + 4  # a loss chunk's bf16 logits, float32 log-softmax and its gradient


def expert_params(text: dict) -> int:
    """A mixture of experts' layer (Qwen3-MoE, as transformers 5 holds it): its fused expert tensors (gate, up and
    down of each expert) and its router; 0 for a dense layer. No linear module among them: not LoRA targets."""
    experts = text.get("num_experts") or text.get("num_local_experts") or 0
    h, i = text["hidden_size"], text.get("moe_intermediate_size") or text["intermediate_size"]
    return experts * (3 * h * i + h)


def layer_linears(text: dict, kind: str) -> dict[str, tuple[int, int]]:
    """(in, out) of each linear projection of a decoder layer, by module name (LoRA's targets)."""
    h, i = text["hidden_size"], text["intermediate_size"]
    mlp = {} if expert_params(text) else {"gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
    if kind == "linear_attention":
        kd = text["linear_num_key_heads"] * text["linear_key_head_dim"]
        nv = text["linear_num_value_heads"]
        vd = nv * text["linear_value_head_dim"]
        return mlp | {"in_proj_qkv": (h, 2 * kd + vd), "in_proj_z": (h, vd), "in_proj_b": (h, nv),
                      "in_proj_a": (h, nv), "out_proj": (vd, h)}
    hd = text.get("head_dim") or h // text["num_attention_heads"]
    q, kv = text["num_attention_heads"] * hd, text["num_key_value_heads"] * hd
    gate = 2 if text.get("attn_output_gate") else 1  # Qwen3.5's q_proj also yields the output gate
    return mlp | {"q_proj": (h, q * gate), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h)}


def layer_small(text: dict, kind: str) -> int:
    """A layer's parameters outside its projections: norms, the short convolution, decay gates."""
    small = 2 * text["hidden_size"]
    if kind == "linear_attention":
        kd = text["linear_num_key_heads"] * text["linear_key_head_dim"]
        nv = text["linear_num_value_heads"]
        conv = (2 * kd + nv * text["linear_value_head_dim"]) * text["linear_conv_kernel_dim"]
        return small + conv + 2 * nv + text["linear_value_head_dim"]
    return small + 2 * (text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"])


def layer_kinds(text: dict) -> list[str]:
    return text.get("layer_types") or ["full_attention"] * text["num_hidden_layers"]


def linear_params(text: dict) -> int:
    return sum(a * b for kind in layer_kinds(text) for a, b in layer_linears(text, kind).values())


def text_params(config: dict) -> int:
    text = text_config(config)
    tied = text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
    embeddings = text["vocab_size"] * text["hidden_size"] * (1 if tied else 2)
    small = sum(layer_small(text, kind) + expert_params(text) for kind in layer_kinds(text))
    return embeddings + text["hidden_size"] + small + linear_params(text)


def vision_params(config: dict) -> int:
    """Qwen3.5's vision tower: patch and position embeddings, the blocks, the patch merger."""
    v = config.get("vision_config")
    if not v:
        return 0
    h, i, merged = v["hidden_size"], v["intermediate_size"], v["hidden_size"] * v["spatial_merge_size"] ** 2
    patch = h * v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2 + h
    block = 4 * h + 3 * h * h + 3 * h + h * h + h + 2 * h * i + i + h
    merger = 2 * h + merged * merged + merged + v["out_hidden_size"] * merged + v["out_hidden_size"]
    return patch + v["num_position_embeddings"] * h + v["depth"] * block + merger


def lora_params(config: dict, targets: list[str] | None, rank: int) -> int:
    """The LoRA parameters on `targets` (None: every linear projection, as training derives them)."""
    text = text_config(config)
    return sum(rank * (a + b) for kind in layer_kinds(text)
               for name, (a, b) in layer_linears(text, kind).items() if targets is None or name in targets)


def model_config(config) -> tuple[dict | None, str]:
    """(config.json the plan sizes, where it came from): the profile's local snapshot, else the
    registered Qwen3.5-4B's; None for an embedded model (built on CPU)."""
    if config.model.source != "local":
        return None, "the embedded model is built and run on CPU: no GPU plan"
    snapshot = local_model_dir(config.model.path) / "config.json"
    if snapshot.is_file():
        return json.loads(snapshot.read_text()), str(snapshot)
    registered = f"{REGISTERED_CONFIG.relative_to(PROJECT_ROOT)}, the registered Qwen3.5-4B"
    return json.loads(REGISTERED_CONFIG.read_text()), f"{registered} (no snapshot at {snapshot})"


def _row(stage: str, resident: str, resident_bytes: int, vllm_bytes: int | None, step: str, step_bytes: int,
         free_bytes: int) -> dict:
    """`free_bytes`: what is left at the stage's peak (negative: it does not fit)."""
    return {"stage": stage, "resident": resident, "resident_bytes": resident_bytes, "vllm_bytes": vllm_bytes,
            "step": step, "step_bytes": step_bytes, "free_bytes": free_bytes, "fits": free_bytes >= 0}


def vllm_row(stage: str, config, vocab: int, total: int, beside: tuple[int, str] = (0, "-"),
             scoring: bool = False) -> dict:
    """vLLM starts with `beside` resident: it needs its reservation free, and beside the reservation
    and the CUDA contexts the largest step that vLLM's profiling does not see (scoring's prompt
    log-probs at the instrument's cap; generation has none)."""
    v = config.vllm
    step, label = 0, "sampling (inside the reservation)"
    if scoring:
        try:
            tokens = scoring_token_cap(total, v.gpu_memory_utilization, vocab, v.in_process)
            label = f"prompt log-probs, {tokens:,} tokens/step"
        except DeviceError:
            tokens = config.harvest.record_limit
            label = f"prompt log-probs, {tokens:,} tokens (no cap of 1,024 or more fits)"
        step = logprob_step_bytes(tokens, vocab)
    free = headroom(total, v.gpu_memory_utilization, v.in_process) - beside[0] - step
    return _row(stage, beside[1], beside[0], reservation(total, v.gpu_memory_utilization), label, step, free)


def hf_row(stage: str, total: int, resident: tuple[int, str], step: tuple[int, str]) -> dict:
    """A Transformers model in the stage's own process (one CUDA context)."""
    return _row(stage, resident[1], resident[0], None, step[1], step[0], total - contexts(True) - resident[0] - step[0])


def training_row(config, model: dict, total: int) -> dict:
    t, text, width = config.training, text_config(model), DTYPE_BYTES[config.compute.dtype]
    nf4 = config.compute.quantization == "nf4"
    linear, rest = linear_params(text), text_params(model) - linear_params(text)
    weights = int(linear * NF4_BYTES) + rest * width if nf4 else (linear + rest) * width
    targets = t.target_modules.get(architecture_key(text.get("model_type") or model.get("model_type") or ""))
    lora = lora_params(model, targets, t.lora.rank) * LORA_STATE_BYTES
    tokens, h, layers = min(t.max_length, config.harvest.record_limit), text["hidden_size"], len(layer_kinds(text))
    one_layer = tokens * (3 * text["intermediate_size"] + 8 * h) * width
    kept = tokens * h * width * layers if t.gradient_checkpointing else one_layer * layers
    step = kept + one_layer + t.loss_chunk_tokens * text["vocab_size"] * LOSS_BYTES
    what = f"{'NF4' if nf4 else config.compute.dtype} base {weights / GIB:.2f} + LoRA state {lora / GIB:.2f} GiB"
    return hf_row("training (one adapter at a time)", total, (weights + lora, what),
                  (step, f"activations of a {tokens:,}-token record (estimate)"))


def memory_plan(config, model: dict, total: int) -> list[dict]:
    """One row per engine stage on a device of `total` bytes (see the module doc)."""
    text, width, limit = text_config(model), DTYPE_BYTES[config.compute.dtype], config.harvest.record_limit
    size = text_params(model) * width
    weights = (size, f"{config.compute.dtype} text weights {size / GIB:.2f} GiB")
    reference = hf_row("parity gate: reference", total, weights, (limit * 3 * text["intermediate_size"] * width,
                                                                  f"one layer's MLP over {limit:,} tokens (estimate)"))
    if config.harvest.backend == "vllm":  # on CUDA the instruments take turns (lifetime.one_instrument_resident)
        fast = vllm_row("parity gate: fast (vLLM)", config, text["vocab_size"], total, (0, "reference released"),
                        scoring=True)
        generate = vllm_row("", config, text["vocab_size"], total)
    else:
        fast = {**reference, "stage": "parity gate: fast (shares the model)"}
        generate = hf_row("", total, weights, (0, "KV cache of a batch (not estimated)"))
    bank = {**(fast if config.scoring.instrument == "fast" else reference), "stage": "score bank"}
    named = [{**generate, "stage": s} for s in ("harvest (trace bank)", "R1 rollouts", "merge + deployment probe",
                                                 "Stage A / Stage B generations")]
    return [named[0], reference, fast, bank, named[1], training_row(config, model, total), *named[2:]]


def memory_notes(config, model: dict, source: str, total: int) -> list[str]:
    """Where each figure comes from, and what the parity gate's turns save."""
    text, width, v = text_config(model), DTYPE_BYTES[config.compute.dtype], config.vllm
    weights, vocab, limit = text_params(model) * width, text["vocab_size"], config.harvest.record_limit
    notes = [f"model: {source}: text model {text_params(model):,} parameters ({weights / GIB:.2f} GiB in "
             f"{config.compute.dtype}), vision tower {vision_params(model):,} (neither Transformers' causal LM nor "
             "vLLM with language_model_only loads it)",
             f"vLLM (0.32.0) needs gpu_memory_utilization {v.gpu_memory_utilization} x {total / GIB:.2f} GiB = "
             f"{reservation(total, v.gpu_memory_utilization) / GIB:.2f} GiB free at start (request_memory); its "
             f"weights ({weights / GIB:.2f} GiB), profiled activations and KV cache lie inside; beside it "
             f"{contexts(v.in_process) / GIB:.0f} GiB of CUDA contexts are allowed for",
             f"prompt log-probs (V1 model runner): tokens x {vocab:,} x 10 bytes; a whole {limit:,}-token record "
             f"in one step {logprob_step_bytes(limit, vocab) / GIB:.2f} GiB (its float32 log-probs alone "
             f"{limit * vocab * 4 / GIB:.2f} GiB), so the scoring instrument caps max_num_batched_tokens; the V2 "
             f"runner (0.32's default on CUDA) takes 1,024-row chunks ({1024 * vocab * 2 / GIB:.2f} GiB)"]
    if config.harvest.backend == "vllm":
        kept = headroom(total, v.gpu_memory_utilization, v.in_process) - weights
        notes.append(f"parity gate: the reference model is released before vLLM starts (resources/scoring.py); "
                     f"kept beside it, vLLM's start would be {-kept / GIB:.2f} GiB short" if kept < 0 else
                     f"parity gate: the reference model is released before vLLM starts (kept, {kept / GIB:.2f} GiB "
                     "would remain)")
    return notes
