"""Training throughput of the weighted, chunked loss step vs a plain Hugging Face causal-LM loss step.

Same model (a random Qwen3, LoRA on every decoder projection), same records, batch 1, one
optimizer step per record, interleaved rounds; tokens/s of each and their ratio (target >= 0.9x).
Then the full matrix's device-hours: the registered 34,446,994 forward tokens at the full
profile's envelope, and at that envelope scaled by the measured ratio.

Run: .venv/bin/python benchmarks/bench_training.py [--vocab 32000] [--hidden 256] [--layers 4]
     [--tokens 512] [--records 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time

import torch

from apsft_dagster.core.config import load_config
from apsft_dagster.core.training.loop import attach_adapter, record_loss
from apsft_dagster.core.training.records import Example

REGISTERED_FORWARD_TOKENS = 34_446_994


def model_and_records(args):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                      num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=args.hidden // 4, max_position_embeddings=4096)
    model = Qwen3ForCausalLM(cfg)
    model.config.use_cache = False
    n, p = args.tokens, args.tokens // 8
    records = []
    for i in range(args.records):
        ids = torch.randint(0, args.vocab, (n,)).tolist()
        segments = [0] * p + [1] * (n - p - 16) + [2] * 16
        records.append(Example(i, tuple(ids), tuple(segments), tuple((0.0, 0.5, 1.0)[s] for s in segments), False))
    return model, records


def run(model, records, training, weighted: bool) -> float:
    optimizer = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-5)
    model.train()
    started, tokens = time.perf_counter(), 0
    for ex in records:
        if weighted:
            total, weight, _ = record_loss(model, ex, training.loss_chunk_tokens)
            (total / weight).backward()
        else:
            ids = torch.tensor([ex.input_ids])
            model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += len(ex.input_ids)
    return tokens / (time.perf_counter() - started)


def main() -> None:
    ap = argparse.ArgumentParser()
    for name, default in (("vocab", 32000), ("hidden", 256), ("layers", 4), ("tokens", 512), ("records", 8),
                          ("rounds", 3)):
        ap.add_argument(f"--{name}", type=int, default=default)
    args = ap.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    training = load_config("smoke").training
    model, records = model_and_records(args)
    model, *_ = attach_adapter(model, training, 42)
    run(model, records[:2], training, True)  # warm both paths
    run(model, records[:2], training, False)
    best = {True: 0.0, False: 0.0}
    for _ in range(args.rounds):
        for weighted in (False, True):
            best[weighted] = max(best[weighted], run(model, records, training, weighted))
    ratio = best[True] / best[False]
    print(f"model: Qwen3 hidden {args.hidden}, {args.layers} layers, vocab {args.vocab:,}; {args.records} records of "
          f"{args.tokens} tokens, LoRA rank {training.lora.rank}, {torch.get_num_threads()} threads")
    print(f"plain HF causal-LM loss step : {best[False]:8.1f} tokens/s (best of {args.rounds})")
    print(f"weighted chunked loss step   : {best[True]:8.1f} tokens/s  = {ratio:.3f}x (target >= 0.9x)")
    full = _full_envelope()
    lo, hi = full["low"], full["high"]
    print(f"full matrix ({REGISTERED_FORWARD_TOKENS:,} forward tokens): {REGISTERED_FORWARD_TOKENS / hi / 3600:.2f}-"
          f"{REGISTERED_FORWARD_TOKENS / lo / 3600:.2f} device-hours at the full envelope "
          f"{lo:,.0f}-{hi:,.0f} tokens/s; "
          f"{REGISTERED_FORWARD_TOKENS / (hi * ratio) / 3600:.2f}-"
          f"{REGISTERED_FORWARD_TOKENS / (lo * ratio) / 3600:.2f} "
          "with the measured loss-step ratio applied")


def _full_envelope() -> dict:
    import yaml

    from apsft_dagster.core.paths import CONFIG_DIR

    return yaml.safe_load((CONFIG_DIR / "full.yaml").read_text())["training"]["throughput_tokens_per_s"]


if __name__ == "__main__":
    main()
