"""Scorer throughput vs (a) a bare forward pass that stops at the final hidden states (the
practical limit) and (b) a naive scorer (full-vocabulary log-softmax at every position, separate
passes for the answer and the joint likelihood). Same model, same traces, batch of one each.

Run: .venv/bin/python benchmarks/bench_scoring.py [STORE_DIR]   (a store with a harvested trace
bank; default .apsft/store/smoke). Targets: scorer >= 0.85 x bare, >= 2 x naive.
"""

from __future__ import annotations

import sys
import time

import polars as pl
import torch

from apsft_dagster.core.base_model import base_model_path
from apsft_dagster.core.config import load_config
from apsft_dagster.core.paths import store_root
from apsft_dagster.core.protocol import BOUNDARY, format_answer, format_prompt, locate_spans
from apsft_dagster.core.scoring import score_trace
from apsft_dagster.core.store import Store


@torch.no_grad()
def naive(model, tok, prompt, thought, answer):
    sums = []
    for start_text in (prompt + thought + BOUNDARY, prompt + thought):  # answer pass, then joint pass
        enc = tok(prompt + thought + BOUNDARY + answer, add_special_tokens=False, return_offsets_mapping=True)
        ids = torch.tensor([enc["input_ids"]])
        logprobs = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
        sums.append(sum(float(logprobs[i - 1, ids[0, i]]) for i in range(1, ids.shape[1])
                        if enc["offset_mapping"][i][0] >= len(start_text)))
    return sums


@torch.no_grad()
def bare(model, tok, prompt, thought, answer):
    ids = torch.tensor([locate_spans(tok, prompt, thought, answer).input_ids])
    return getattr(model, model.base_model_prefix)(input_ids=ids).last_hidden_state


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    config = load_config("smoke")
    store = Store(sys.argv[1] if len(sys.argv) > 1 else store_root("smoke"))
    path = base_model_path(config, store)
    model, tok = AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    catalog = dict(store.get_parquet("task_catalog.parquet").select("task_id", "prompt").iter_rows())
    answers = dict(store.get_parquet("task_catalog.parquet").select("task_id", "answer").iter_rows())
    traces = pl.concat([store.get_parquet(p.relative_to(store.root).as_posix())
                        for p in sorted((store.root / "trace_bank" / "shards").glob("*.parquet"))]).filter("eligible")
    items = [(format_prompt(catalog[t]), z, format_answer(answers[t]))
             for t, z in traces.select("task_id", "thought").iter_rows()]
    tokens = sum(len(locate_spans(tok, *item).input_ids) for item in items)
    rates = {}
    for name, fn in (("bare", bare), ("scorer", score_trace), ("naive", naive)) * 2:
        start = time.perf_counter()
        for item in items:
            fn(model, tok, *item)
        rates[name] = max(rates.get(name, 0.0), tokens / (time.perf_counter() - start))
    print(f"model {config.model.name}, {len(items)} traces, {tokens / len(items):.0f} tokens per scored sequence, "
          f"vocab {len(tok)}")
    for name, rate in rates.items():
        print(f"{name:>7}: {rate:,.0f} tokens/s (best of 2)")
    print(f"scorer / bare forward: {rates['scorer'] / rates['bare']:.3f} (target >= 0.85)")
    print(f"scorer / naive:        {rates['scorer'] / rates['naive']:.2f} (target >= 2)")


if __name__ == "__main__":
    main()
