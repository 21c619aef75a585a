"""How fast this machine is right now: one fixed CPU workload, timed, so wall times measured at
different hours can be read together.

Machines of this project's kind differ by about 1.4x, and one machine drifts too: on 2026-12-03
the same suite tree took 420 s, then 472 s an hour later, and command 1's `apsft run` 110 s at one
hour and 132 s at another, with nothing in its path changed (docs/timings.md). A figure measured
beside a calibration says which.

The workload is what dominates the project's CPU time: the shipped smoke model (Qwen3.5's layout,
the reference linear-attention kernels) sampling 16 requests x 8 rows for 160 new tokens from
100-token prompts, through the harvest's engine and seeded sampler, on one pinned torch thread.
It prints the median of `--repeat` timings in seconds (lower is faster) and, with `--json`, writes
them. `benchmarks/fresh_clone.sh` runs it before and after each measured command.

Run: .venv/bin/python benchmarks/bench_calibrate.py [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: the profiles' one pinned thread

import apsft_dagster  # noqa: E402,F401  pins the CPU kernels before torch loads

ROWS, NEW_TOKENS, PROMPT_TOKENS, PER_REQUEST = 128, 160, 100, 8


def workload():
    """(engine, requests, sampling): the fixed generation timed by `main`."""
    import torch

    from apsft_dagster.core.config import Sampling, load_config
    from apsft_dagster.core.embedded.cache import profile_key
    from apsft_dagster.core.embedded.shipped import shipped_entry
    from apsft_dagster.core.engines.base import GenerationRequest
    from apsft_dagster.core.engines.transformers_engine import TransformersEngine

    torch.set_num_threads(1)
    folder = shipped_entry(profile_key(load_config("smoke")))
    if folder is None:
        raise SystemExit("bench_calibrate: the package ships no smoke model for this code (refresh_model_seed.py)")
    engine = TransformersEngine.load(str(folder), ["<|im_end|>"])
    draw = random.Random(0)
    vocab = engine.model.config.vocab_size
    never = (vocab + 1,)  # a stop id no row draws: every request runs its NEW_TOKENS
    requests = [GenerationRequest(prompt_ids=tuple(draw.randrange(10, vocab - 10) for _ in range(PROMPT_TOKENS)),
                                  n=PER_REQUEST, max_tokens=NEW_TOKENS, seed=i, stop_token_ids=never)
                for i in range(ROWS // PER_REQUEST)]
    return engine, requests, Sampling(temperature=1.0, top_p=0.95, top_k=20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="write the timings here")
    args = parser.parse_args()
    engine, requests, sampling = workload()
    engine.generate(requests[:1], sampling)  # warm-up: first-call allocations
    seconds = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        engine.generate(requests, sampling)
        seconds.append(time.perf_counter() - started)
    median = statistics.median(seconds)
    print(f"calibration: {median:.2f} s ({ROWS} rows x {NEW_TOKENS} new tokens, smoke model, 1 thread; "
          f"runs {', '.join(f'{s:.2f}' for s in seconds)})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"median_s": median, "seconds": seconds, "rows": ROWS, "new_tokens": NEW_TOKENS}, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
