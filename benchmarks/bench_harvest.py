"""Harvest throughput: the natural-thought protocol vs a bare `model.generate` on the same work.

Both sides sample the same tasks with the same model, sampler (temperature/top-p/top-k), batch
(one `generate` of N samples per task) and allowance; the protocol adds its continuations, loop
detection, eligibility, record-length tokenization and row building. Throughput = generated
tokens / wall seconds. Target: protocol >= 0.9 x bare.

Run: .venv/bin/python benchmarks/bench_harvest.py [STORE_DIR]   (a store where `apsft run`
materialized task_catalog and base_model; default .apsft/store/smoke)
"""

from __future__ import annotations

import sys
import time

import polars as pl
import torch

from apsft_dagster.core.base_model import base_model_path
from apsft_dagster.core.config import load_config
from apsft_dagster.core.engines.transformers_engine import TransformersEngine
from apsft_dagster.core.harvest import HarvestTask, harvest_task
from apsft_dagster.core.paths import store_root
from apsft_dagster.core.protocol import STOP_TOKENS, format_prompt
from apsft_dagster.core.seeds import derive_seed
from apsft_dagster.core.store import Store


def main() -> None:
    config = load_config("smoke")
    store = Store(sys.argv[1] if len(sys.argv) > 1 else store_root("smoke"))
    engine = TransformersEngine.load(str(base_model_path(config, store)), STOP_TOKENS)
    tok, cfg = engine.tokenizer, config.harvest
    catalog = store.get_parquet("task_catalog.parquet").filter(pl.col("split") == "train").sort("task_id")
    tasks = [HarvestTask(r["task_id"], r["family"], r["level"], r["prompt"], r["answer"])
             for r in catalog.iter_rows(named=True)]

    def bare() -> int:
        tokens = 0
        for task in tasks:
            ids = torch.tensor([tok(format_prompt(task.prompt), add_special_tokens=False)["input_ids"]])
            torch.manual_seed(derive_seed(config.seeds.experiment, task.task_id, "main"))
            out = engine.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                        temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p,
                                        top_k=cfg.sampling.top_k, max_new_tokens=cfg.allowance,
                                        num_return_sequences=cfg.samples_per_task,
                                        eos_token_id=list(engine.stop_token_ids), pad_token_id=tok.pad_token_id)
            new = out[:, ids.shape[1]:]
            tokens += int((new != tok.pad_token_id).sum())
        return tokens

    def protocol() -> int:
        return sum(int(harvest_task(engine, tok, t, cfg, config.seeds.experiment)["n_tokens"].sum()) for t in tasks)

    rates = {}
    for name, run in (("bare", bare), ("protocol", protocol), ("bare", bare), ("protocol", protocol)):
        start = time.perf_counter()
        tokens = run()
        rates.setdefault(name, []).append(tokens / (time.perf_counter() - start))
    bare_rate, protocol_rate = max(rates["bare"]), max(rates["protocol"])
    print(f"model: {config.model.name}, {len(tasks)} tasks x N={cfg.samples_per_task}, allowance {cfg.allowance}")
    print(f"bare model.generate: {bare_rate:,.0f} generated tokens/s (best of 2)")
    print(f"harvest protocol:    {protocol_rate:,.0f} generated tokens/s (best of 2)")
    print(f"ratio protocol/bare: {protocol_rate / bare_rate:.3f} (target >= 0.9)")


if __name__ == "__main__":
    main()
