"""Train one policy into the store: the adapter, its loss curve and its report (written last).

The report is training's receipt: the arm file and manifest it trained on, the exact optimizer
steps (asserted), the initial and final adapter digests, the LoRA pairs, which base weights were
used, and the loss curve. It holds nothing machine-dependent (no wall time), so a rerun writes
the same bytes; timings go to the asset's metadata. An existing report is invalidated before the
adapter is replaced.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable

from apsft_dagster.core.config import Config
from apsft_dagster.core.engines.lifetime import pin_threads
from apsft_dagster.core.errors import TrainingError
from apsft_dagster.core.layout import (
    BASE_MODEL_REPORT,
    adapter_checkpoint,
    adapter_dir,
    adapter_report,
    arm_file,
    loss_curve,
)
from apsft_dagster.core.policies import parse_policy
from apsft_dagster.core.store import Store, json_bytes, sha256_bytes
from apsft_dagster.core.training.checkpoint import Checkpoints
from apsft_dagster.core.training.loop import attach_adapter, base_weights, load_base, seed_everything, train
from apsft_dagster.core.training.lora import adapter_state, save_adapter, state_digest
from apsft_dagster.core.training.plot import loss_curve_png
from apsft_dagster.core.training.records import encode_rows, windows

FORMAT = "apsft-adapter/1"


def arm_records(store: Store, arm: str) -> tuple[list[dict], str]:
    """An arm's training records and the file's SHA-256, read and verified once."""
    data, digest = store.read(arm_file(arm))
    return [json.loads(line) for line in gzip.decompress(data).splitlines()], digest


def policy_identity(config: Config, policy: str, arm_sha256: str) -> str:
    """What a checkpoint must match to be resumed: the data, the training settings, the seed."""
    return sha256_bytes(json_bytes({"policy": policy, "arm_sha256": arm_sha256, "model": config.model.model_dump(),
                                    "training": config.training.model_dump(mode="json"),
                                    "compute": config.compute.model_dump()}))


def train_policy(store: Store, config: Config, policy: str, base_path: str, manifest_sha256: str,
                 log: Callable[[str], None] = print) -> dict:
    """Train, save and receipt one policy; returns the report plus `timing` (not stored)."""
    import torch
    from transformers import AutoTokenizer

    arm, seed = parse_policy(policy)
    started = time.perf_counter()
    rows, arm_sha = arm_records(store, arm)
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    examples = encode_rows(rows, tokenizer, config.training)
    plan = windows(len(rows), config.training.epochs, config.training.grad_accum, seed, arm)
    pin_threads(config.compute)  # the adapter's bytes depend on it (engines/lifetime.pin_threads)
    if config.compute.device == "cpu":
        torch.use_deterministic_algorithms(True)
    seed_everything(seed)  # before the base model loads
    model, targets, pairs, initial = attach_adapter(load_base(base_path, config.compute), config.training, seed)
    log(f"{policy}: {len(rows)} records x {config.training.epochs} epochs = {len(plan)} optimizer steps, "
        f"{pairs} LoRA pairs, initial adapter {initial[:12]}")
    checkpoints = Checkpoints(store, adapter_checkpoint(policy))
    steps, curve, resumed_from = train(model, examples, plan, config.training, initial_digest=initial,
                                       identity=policy_identity(config, policy, arm_sha), checkpoints=checkpoints,
                                       log=lambda m: log(f"{policy}: {m}"))
    if steps != len(plan):
        raise TrainingError(f"{policy}: {steps} optimizer steps taken, expected exactly {len(plan)}")
    final = state_digest(adapter_state(model))
    store.remove(adapter_report(policy))  # the receipt goes first: a crash below leaves no finished policy
    adapter_sha = store.put_dir(adapter_dir(policy), lambda d: save_adapter(model, d, config.model.name,
                                                                             config.model.revision))
    png_sha = store.put_bytes(loss_curve(policy), loss_curve_png(curve, f"{policy}: loss per optimizer step"))
    forward = sum(len(ex.input_ids) for ex in examples) * config.training.epochs
    report = {
        "format": FORMAT, "policy": policy, "arm": arm, "seed": seed, "config_digest": config.sealed_digest,
        "arm_file": arm_file(arm), "arm_sha256": arm_sha, "sft_manifest_sha256": manifest_sha256,
        "base_model_fingerprint": store.get_json(BASE_MODEL_REPORT)["fingerprint"],
        "base_weights": base_weights(config.compute),
        "rows": len(rows), "epochs": config.training.epochs, "grad_accum": config.training.grad_accum,
        "optimizer_steps": steps, "truncated_records": sum(ex.truncated for ex in examples),
        "forward_tokens": forward, "lora": config.training.lora.model_dump(), "target_modules": targets,
        "lora_pairs": pairs, "initial_adapter_sha256": initial, "final_adapter_sha256": final,
        "adapter_files_sha256": adapter_sha, "loss_curve_png_sha256": png_sha, "curve": curve,
    }
    store.put_json(adapter_report(policy), report)
    checkpoints.clear()
    seconds = time.perf_counter() - started
    trained_tokens = sum(p["tokens"] for p in curve[resumed_from:])
    return {**report, "timing": {"seconds": seconds, "resumed_from_step": resumed_from,
                                 "tokens_per_s": trained_tokens / seconds if seconds else 0.0}}


def warmup_tokens_per_s(store: Store, config: Config, base_path: str, arm: str) -> float | None:
    """Steady-state training throughput on the first `training.warmup_records` records of `arm`
    (forward + backward through a fresh adapter, no optimizer step; load and first-step time
    excluded: loop.measure_throughput); None when set to 0."""
    n = config.training.warmup_records
    if n == 0:
        return None
    from transformers import AutoTokenizer

    from apsft_dagster.core.engines.memory import free_memory
    from apsft_dagster.core.training.loop import measure_throughput

    examples = encode_rows(arm_records(store, arm)[0][:n], AutoTokenizer.from_pretrained(base_path), config.training)
    model, *_ = attach_adapter(load_base(base_path, config.compute), config.training, config.seeds.experiment)
    tokens_per_s = measure_throughput(model, examples, config.training)
    del model
    free_memory()
    return tokens_per_s
