"""Hand the vLLM lane its models: built here, by the main venv, never under vLLM's transformers.

Writes into OUT (default .apsft/vllm_lane):
  base/     the smoke_vllm profile's embedded model (Qwen3's layout), from the model cache or built
  adapter/  a LoRA adapter trained on it with the project's training loop (worked solutions from
            the pretraining seed space past every index the build used, so no split task)
  merged/   base + adapter through `merge_snapshot`, the merge every merged policy takes
  handover.json  what was made, with each directory's fingerprint
A rerun with the same inputs rewrites the same bytes. The lane (`.venv-vllm/bin/python -m pytest
tests/vllm_lane`) reads the directories and never rebuilds them.

Usage: .venv/bin/python scripts/vllm_lane_model.py [OUT]
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from apsft_dagster.core.config import load_config
from apsft_dagster.core.paths import state_dir
from apsft_dagster.core.store import dir_digests, fingerprint

PROFILE = "smoke_vllm"
ROWS = 12  # worked solutions the adapter learns: 3 optimizer steps per epoch at grad_accum 4
FIRST_INDEX = 100_000  # far past the build's pretraining and capability indices (150 + 45 per cell)


def build_base(config, out: Path) -> dict:
    from apsft_dagster.core.embedded.cache import embedded_model
    from apsft_dagster.core.tasks.catalog import build_catalog

    out.mkdir(parents=True)
    prompts = build_catalog(config)["prompt"].to_list()
    report = embedded_model(config, prompts, out, lambda message: print(f"  {message}", flush=True))
    return {"cache": report["cache"], "cache_key": report["cache_key"], "parameters": report["parameters"]}


def adapter_rows(config) -> list[dict]:
    from apsft_dagster.core.tasks import generate

    split = config.tasks.train
    cells = [(f, lv) for f in split.families for lv in split.levels]
    rows = []
    for i in range(ROWS):
        family, level = cells[i % len(cells)]
        task = generate(family, level, FIRST_INDEX + i, config.seeds.pretrain_tasks)
        rows.append({"prompt": task.prompt, "thought": task.solution, "answer": task.answer})
    return rows


def train_adapter(config, base: Path, out: Path) -> dict:
    import tempfile

    import torch
    from transformers import AutoTokenizer

    from apsft_dagster.core.engines.lifetime import pin_threads
    from apsft_dagster.core.store import Store
    from apsft_dagster.core.training.checkpoint import Checkpoints
    from apsft_dagster.core.training.loop import attach_adapter, load_base, seed_everything, train
    from apsft_dagster.core.training.lora import save_adapter
    from apsft_dagster.core.training.records import encode_rows, windows

    seed = config.seeds.experiment
    rows = adapter_rows(config)
    examples = encode_rows(rows, AutoTokenizer.from_pretrained(base), config.training)
    plan = windows(len(rows), config.training.epochs, config.training.grad_accum, seed, "vllm_lane")
    pin_threads(config.compute)
    torch.use_deterministic_algorithms(True)
    seed_everything(seed)
    model, targets, pairs, initial = attach_adapter(load_base(str(base), config.compute), config.training, seed)
    with tempfile.TemporaryDirectory() as scratch:  # checkpoints: none kept, the run is seconds long
        steps, curve, _ = train(model, examples, plan, config.training, initial_digest=initial, identity="vllm_lane",
                                checkpoints=Checkpoints(Store(Path(scratch)), "checkpoint"),
                                log=lambda m: print(f"  adapter: {m}", flush=True))
    out.mkdir(parents=True)
    save_adapter(model, out, config.model.name, config.model.revision)
    return {"rows": len(rows), "optimizer_steps": steps, "lora_pairs": pairs, "final_loss": curve[-1]["loss"],
            "targets": targets}


def main(argv: list[str]) -> int:
    from apsft_dagster.core.training.merge import merge_snapshot

    out = Path(argv[0]) if argv else state_dir() / "vllm_lane"
    config = load_config(PROFILE)
    started = time.perf_counter()
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    print(f"vllm lane: building the {PROFILE} models into {out}", flush=True)
    made = {"profile": PROFILE, "base": build_base(config, tmp / "base")}
    made["adapter"] = train_adapter(config, tmp / "base", tmp / "adapter")
    made["merge"] = merge_snapshot(tmp / "base", tmp / "adapter", tmp / "merged")
    made["fingerprints"] = {name: fingerprint(dir_digests(tmp / name)) for name in ("base", "adapter", "merged")}
    (tmp / "handover.json").write_text(json.dumps(made, sort_keys=True, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)  # whole or not at all: the lane never sees half a handover
    print(f"vllm lane: base ({made['base']['cache']}), adapter ({made['adapter']['optimizer_steps']} steps, final loss "
          f"{made['adapter']['final_loss']:.3f}), merged ({made['merge']['lora_pairs']} pairs) in "
          f"{time.perf_counter() - started:.0f} s -> {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
