"""A decoding step's draw on Qwen3.5's 248,320 ids while k of a request's 64 samples are still open:
the engine's per-sample draw (core/engines/decode.py, `SeededDraw`: one generator a sample, a draw per
open row) against the joint draw it replaced (as `num_return_sequences=64` draws: torch's `multinomial`
over all 64 rows while any is open, a closed row lending an open row's probabilities).

torch's CPU `multinomial` takes one exponential per id of every row it is given, so the joint draw costs
64 rows whatever k is; the per-sample draw costs k. The logits are random (the warpers keep top-k 20 and
top-p 0.95 of them, as the harvest does); the figure is milliseconds a step, median of 7, and the ratio.
Target: at k = 1 (a task's last open row, the harvest's tail) the per-sample draw >= 10x faster; at
k = 64 (every row open) within 10% of the joint draw.

Run: .venv/bin/python benchmarks/bench_tail_draw.py [THREADS]   (2 by default, `full_cpu`'s)
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from apsft_dagster.core.config import Sampling
from apsft_dagster.core.engines.decode import SeededDraw
from apsft_dagster.core.engines.seeded_sampler import warpers

VOCAB, SAMPLES = 248_320, 64  # Qwen3.5's embedding rows; the registered samples per task
HARVEST = Sampling(temperature=1.0, top_p=0.95, top_k=20)


def joint_draw(generator: torch.Generator):
    """The replaced draw: one generator over the request's 64 rows while any is open."""
    warp = warpers(HARVEST)

    def draw(rows: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(warp(None, logits), dim=-1)
        full = probs[:1].expand(SAMPLES, -1).clone()
        full[rows] = probs
        return torch.multinomial(full, num_samples=1, generator=generator)[rows, 0]
    return draw


def step_ms(draw, rows: torch.Tensor, logits: torch.Tensor) -> float:
    draw(rows, logits)  # warm
    times = []
    for _ in range(7):
        start = time.perf_counter()
        draw(rows, logits)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    logits = torch.randn(SAMPLES, VOCAB, generator=torch.Generator().manual_seed(0))
    print(f"{'open rows':>9}  {'joint ms':>9}  {'per-sample ms':>13}  {'ratio':>6}")
    for k in (64, 16, 4, 1):
        rows = torch.arange(k)
        joint = step_ms(joint_draw(torch.Generator().manual_seed(1)), rows, logits[:k])
        alone = step_ms(SeededDraw(range(SAMPLES), HARVEST), rows, logits[:k])
        print(f"{k:>9}  {joint:>9.1f}  {alone:>13.1f}  {joint / alone:>5.1f}x")


if __name__ == "__main__":
    main()
