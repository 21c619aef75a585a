"""Build the embedded default: tokenizer + tiny policy (Qwen3.5's or Qwen3's layout) trained on a disjoint corpus,
capability-checked."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from pathlib import Path

import torch

from apsft_dagster.core.config import KNOWN_FAMILIES, Config
from apsft_dagster.core.embedded.capability import capability_report
from apsft_dagster.core.embedded.layout import VISION_TOKENS, build_model, save_snapshot
from apsft_dagster.core.embedded.model import encode_examples, pretrain
from apsft_dagster.core.embedded.tokenizer import train_tokenizer
from apsft_dagster.core.protocol import format_record, format_thought
from apsft_dagster.core.tasks import STEPS_BY_LEVEL, Task, generate


def pretraining_tasks(config: Config, exclude_prompts: Collection[str]) -> list[Task]:
    """Worked solutions of all five families, every level, from the pretraining seed space.

    Any prompt that also occurs in an experiment split is dropped, so the corpus is disjoint
    from every split by construction, not only by seed.
    """
    per_cell = config.embedded.pretrain_tasks_per_cell
    tasks = (generate(f, lv, i, config.seeds.pretrain_tasks)
             for f in KNOWN_FAMILIES for lv in STEPS_BY_LEVEL for i in range(per_cell))
    return [t for t in tasks if t.prompt not in exclude_prompts]


def capability_tasks(config: Config, exclude_prompts: Collection[str]) -> list[Task]:
    """Train-family, train-level tasks past the pretraining indices of the same seed space."""
    split = config.tasks.train
    cells = [(f, lv) for f in split.families for lv in split.levels]
    per_cell = math.ceil(config.embedded.capability_tasks / len(cells))
    start = config.embedded.pretrain_tasks_per_cell
    tasks = [generate(f, lv, start + i, config.seeds.pretrain_tasks) for f, lv in cells for i in range(per_cell)]
    return [t for t in tasks if t.prompt not in exclude_prompts][:config.embedded.capability_tasks]


def build_embedded(config: Config, catalog_prompts: Collection[str], out_dir: Path,
                   log: Callable[[str], None], real_vocab: bool = False) -> dict:
    """Train, save (`save_pretrained`) into `out_dir`, check its capability; return the report for metadata.
    `real_vocab`: on Qwen3.5's real tokenizer and its 248,320 embedding rows (core/qwen35/pretrain.py)
    instead of a tokenizer trained on the corpus."""
    from apsft_dagster.core.determinism import check_cpu_kernels
    from apsft_dagster.core.progress import Throttle

    cfg, architecture = config.embedded, config.model.architecture
    check_cpu_kernels()
    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True)
    corpus = pretraining_tasks(config, set(catalog_prompts))
    records = [format_record(t.prompt, format_thought(t.solution), t.answer) for t in corpus]
    if real_vocab:
        from apsft_dagster.core.qwen35.pretrain import UsedRowsLoss, real_vocabulary, used_ids

        tokenizer, rows = real_vocabulary()
    else:
        extra = VISION_TOKENS if architecture == "qwen3_5" else ()
        tokenizer, rows = train_tokenizer(records, cfg.vocab_size, extra), None
    snapshot, model = build_model(architecture, cfg, tokenizer, config.seeds.experiment, vocab_rows=rows)
    examples = encode_examples(corpus, tokenizer)
    trained = UsedRowsLoss(model, used_ids(examples, tokenizer)) if real_vocab else model
    log(f"pretraining {sum(p.numel() for p in model.parameters()):,} parameters on {len(examples)} "
        f"worked solutions for {cfg.train_steps} steps")
    throttle = Throttle()  # the first step, each tenth, the last, and one each half minute between

    def progress(step: int, loss: float) -> None:
        line = f"step {step + 1}/{cfg.train_steps} loss {loss:.3f}"
        if throttle.due(line):
            log(line)

    losses = pretrain(trained, examples, cfg, config.seeds.experiment, tokenizer.pad_token_id, progress)
    if real_vocab:
        trained.fold()
    save_snapshot(architecture, snapshot, tokenizer, cfg, out_dir)
    held_out = set(catalog_prompts) | {t.prompt for t in corpus}
    capability = capability_report(model, tokenizer, capability_tasks(config, held_out),
                                   allowance=cfg.capability_allowance, sampling=config.harvest.sampling,
                                   samples=cfg.capability_samples, seed=config.seeds.experiment, log=log)
    tail = losses[-max(1, len(losses) // 10):]
    return {
        "architecture": type(snapshot).__name__,
        "parameters": sum(p.numel() for p in snapshot.parameters()),
        "text_parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        **({"embedding_rows": rows, "pretrained_rows": len(trained.used)} if real_vocab else {}),
        "pretraining_tasks": len(corpus),
        "pretraining_tokens_seen": cfg.train_steps * cfg.batch_size * sum(len(x) for x, _ in examples) // len(examples),
        "final_loss": sum(tail) / len(tail),
        "capability_tasks": cfg.capability_tasks,
        **capability,
    }
