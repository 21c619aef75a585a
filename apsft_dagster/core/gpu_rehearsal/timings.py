"""One function per path the rehearsal times, each through the `full` profile's own code; each
returns its figures and drops its model before it returns (the journal hands the memory back).
Random weights never stop early, so generation runs to max_tokens: tokens/s, not quality."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from apsft_dagster.core.gpu_rehearsal.journal import PhaseSkipped


def record_text(tasks, n_tokens: int, tokenizer) -> tuple[str, str, str]:
    """(formatted prompt, thought, answer) whose record is about n_tokens long: worked solutions
    repeated as one thought."""
    from apsft_dagster.core.protocol import format_answer, format_prompt

    task = tasks[0]
    prompt, answer = format_prompt(task.prompt), format_answer(task.answer)
    pieces, length, i = [], len(tokenizer(prompt)["input_ids"]), 0
    while length < n_tokens:
        piece = tasks[i % len(tasks)].solution + "\n"
        pieces.append(piece)
        length += len(tokenizer(piece)["input_ids"])
        i += 1
    return prompt, "".join(pieces), answer


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def time_scoring(config, path: str, tasks, lengths: list[int], log) -> dict:
    import torch

    from apsft_dagster.core.engines.lifetime import load_causal_lm
    from apsft_dagster.core.scoring import score_trace

    model, tokenizer = load_causal_lm(path, config.compute)
    out = {}
    with torch.no_grad():
        for n in lengths:
            item = record_text(tasks, n, tokenizer)
            score_trace(model, tokenizer, *item)  # warm-up: kernels, allocator
            sync()
            started = time.perf_counter()
            score_trace(model, tokenizer, *item)
            sync()
            seconds = time.perf_counter() - started
            tokens = len(tokenizer(item[0] + item[1])["input_ids"])
            out[str(n)] = {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}
            log(f"scoring {tokens:,}-token record: {tokens / seconds:,.0f} tokens/s")
    return out


def time_training(config, path: str, tasks, record_tokens: int, adapter_dir: Path, log) -> dict:
    import torch
    from transformers import AutoTokenizer

    from apsft_dagster.core.store import Store
    from apsft_dagster.core.training.checkpoint import Checkpoints
    from apsft_dagster.core.training.loop import attach_adapter, base_weights, load_base, measure_throughput, train
    from apsft_dagster.core.training.lora import save_adapter
    from apsft_dagster.core.training.records import encode_rows

    try:
        import bitsandbytes  # noqa: F401
        quantized = torch.cuda.is_available()
    except ImportError:
        quantized = False
    compute = config.compute.model_copy(update={"quantization": "nf4" if quantized else "none"})
    training = config.training.model_copy(update={"max_length": record_tokens + 64})
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompt, thought, answer = record_text(tasks, record_tokens, tokenizer)
    rows = [{"prompt": tasks[0].prompt, "thought": thought, "answer": tasks[0].answer}] * 2
    examples = encode_rows(rows, tokenizer, training)
    model, targets, pairs, initial = attach_adapter(load_base(path, compute), training, 0)
    tokens_per_s = measure_throughput(model, examples, training)
    log(f"training on {len(examples[0].input_ids):,}-token records ({base_weights(compute)}): "
        f"{tokens_per_s:,.0f} tokens/s")
    with tempfile.TemporaryDirectory() as scratch:
        train(model, examples, [[0]], training, initial_digest=initial, identity="rehearsal",
              checkpoints=Checkpoints(Store(Path(scratch)), "checkpoint"), log=lambda m: None)
    adapter_dir.mkdir(parents=True)
    save_adapter(model, adapter_dir, config.model.name, None)
    envelope = training.throughput_tokens_per_s
    return {"tokens_per_s": tokens_per_s, "record_tokens": len(examples[0].input_ids), "base": base_weights(compute),
            "quantization": compute.quantization, "lora_pairs": pairs, "targets": targets,
            "gradient_checkpointing": training.gradient_checkpointing,
            "envelope": {"low": envelope.low, "high": envelope.high},
            "within_envelope": envelope.low <= tokens_per_s <= envelope.high,
            "device_hours_per_million_forward_tokens": 1e6 / tokens_per_s / 3600}


def time_merge(path: str, adapter_dir: Path, out: Path, log) -> dict:
    from apsft_dagster.core.training.merge import merge_snapshot

    started = time.perf_counter()
    counts = merge_snapshot(path, adapter_dir, out)
    seconds = time.perf_counter() - started
    log(f"merge: {counts['lora_pairs']} pairs in {seconds:.1f} s")
    return {"seconds": seconds, **counts}


def greedy_requests(tokenizer, tasks, n: int, max_tokens: int):
    from apsft_dagster.core.engines.base import GenerationRequest
    from apsft_dagster.core.protocol import prompt_ids

    return [GenerationRequest(tuple(prompt_ids(tokenizer, tasks[i % len(tasks)].prompt)), 1, max_tokens, i)
            for i in range(n)]


def time_generation(engine, tasks, n: int, max_tokens: int) -> dict:
    from apsft_dagster.core.engines.base import GREEDY

    requests = greedy_requests(engine.tokenizer, tasks, n, max_tokens)
    engine.generate(requests[:2], GREEDY)  # warm-up
    sync()
    started = time.perf_counter()
    results = engine.generate(requests, GREEDY)
    sync()
    seconds = time.perf_counter() - started
    tokens = sum(len(r[0].token_ids) for r in results)
    return {"requests": n, "new_tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def time_transformers_generation(config, path: str, tasks, n: int, max_tokens: int, log) -> dict:
    from apsft_dagster.core.engines.transformers_engine import TransformersEngine
    from apsft_dagster.core.protocol import STOP_TOKENS

    engine = TransformersEngine.load(path, STOP_TOKENS, config.compute.device, config.compute.dtype)
    try:
        out = time_generation(engine, tasks, n, max_tokens)
    finally:
        engine.close()
    log(f"Transformers generation: {out['tokens_per_s']:,.0f} new tokens/s ({n} requests x {max_tokens})")
    return out


def require_vllm() -> None:
    """PhaseSkipped, saying why, where vLLM cannot serve a Qwen3.5 snapshot here: vLLM absent, or
    torchvision not importable (vLLM's Qwen3.5 module imports its Qwen3-VL module, which imports
    transformers' Qwen2-VL image processor, which imports torchvision, whatever `language_model_only`
    says; PyPI's torchvision is built for the CUDA torch: docs/vllm.md)."""
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001  (CUDA-less or absent vLLM: say why, measure the rest)
        raise PhaseSkipped(f"vllm does not import here: {type(exc).__name__}: {exc}") from None
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # noqa: BLE001  (the CUDA wheel beside the CPU torch raises RuntimeError)
        raise PhaseSkipped("vLLM's Qwen3.5 module imports torchvision (through its Qwen3-VL module and "
                           "transformers' Qwen2-VL image processor), which does not import here: "
                           f"{type(exc).__name__}: {exc}") from None


def time_vllm_generation(config, compute, path: str, tasks, n: int, max_tokens: int, log) -> dict:
    """`VllmEngine` as the harvest starts it (its snapshot choices: `language_model_only` for this layout)."""
    from apsft_dagster.core.engines.vllm_engine import VllmEngine
    from apsft_dagster.core.protocol import STOP_TOKENS

    require_vllm()
    engine = VllmEngine(path, STOP_TOKENS, compute, config.vllm)
    try:  # released even when generation fails: the next phase starts vLLM again
        out = {"version": engine.library_version, "choices": engine.choices, "start_s": engine.start_s,
               "generation": time_generation(engine, tasks, n, max_tokens)}
    finally:
        release_s = engine.close()
    out["generation"]["release_s"] = release_s
    log(f"vLLM {out['version']}: generation {out['generation']['tokens_per_s']:,.0f} new tokens/s "
        f"(started in {out['start_s']:.0f} s)")
    return out


def time_vllm_prompt_logprobs(config, compute, path: str, tasks, record_tokens: int, log) -> dict:
    """`VllmInstrument` as the fast scoring instrument starts it: an LLM of its own, with its token
    cap on CUDA (core/engines/vllm_memory.py)."""
    from apsft_dagster.core.engines.vllm_scoring import VllmInstrument

    require_vllm()
    instrument = VllmInstrument(path, compute, config.vllm)
    try:
        items = [record_text(tasks, record_tokens, instrument.tokenizer)] * 8
        instrument.score(items[:1])  # warm-up
        started = time.perf_counter()
        instrument.score(items)
        seconds = time.perf_counter() - started
    finally:
        instrument.close()
    tokens = 8 * len(instrument.tokenizer(items[0][0] + items[0][1])["input_ids"])
    figures = {"records": 8, "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
               "start_s": instrument.start_s,
               "max_num_batched_tokens": instrument.arguments.get("max_num_batched_tokens")}
    log(f"vLLM: prompt log-probs {tokens / seconds:,.0f} tokens/s")
    return figures


def time_probe(config, base: str, merged: str, max_tokens: int, log) -> dict:
    """The deployment probe as merged_models runs it: the base's and the merged policy's greedy answers to
    the probe's prompts, one engine resident at a time. Random weights and one optimizer step: whether any
    answer differs is reported, not required."""
    from apsft_dagster.core.engines.memory import free_memory
    from apsft_dagster.core.engines.transformers_engine import TransformersEngine
    from apsft_dagster.core.protocol import STOP_TOKENS
    from apsft_dagster.core.training.probe import compare, greedy_outputs, probe_prompts

    prompts, answers, started = probe_prompts(config, ()), [], time.perf_counter()
    for path in (base, merged):
        engine = TransformersEngine.load(path, STOP_TOKENS, config.compute.device, config.compute.dtype)
        try:
            answers.append(greedy_outputs(engine, prompts, max_tokens))
            decode = engine.tokenizer.decode
        finally:
            engine.close()
            free_memory()
    out = {**compare(prompts, *answers, decode), "seconds": time.perf_counter() - started}
    log(f"probe: {out['differing']} of {out['prompts']} prompts answered differently by the merged policy")
    return out
