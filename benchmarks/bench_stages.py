"""Every model-holding stage's tokens/s against a bare batched `generate` or forward of the same
model on the same work, in one run (issue 25, item 3). Target: each stage >= 0.8x its bare twin.

- harvest: `harvest_task` (main batch, continuations, loops, eligibility, rows) against
  `generate(do_sample, num_return_sequences=N)` per task;
- scoring: `score_task` with the reference instrument (records batched by length) against a
  forward to the last hidden states over the same records in the same batches;
- r1: `r1_rollouts` (one seeded rollout per trace, batched) against `generate(do_sample)` over
  the same prompts, left-padded, one batch per task;
- stage_b: `generate_policy` with k samples per task (requests batched, seeded each) against
  `generate(do_sample, num_return_sequences=k)` over the same prompts, 16 tasks a batch;
- evaluation: `generate_policy` greedy against `generate(greedy)`, 128 prompts a batch.

Also the one-at-a-time path each batched stage replaced (r1 and stage_b, on a few requests), as
the speedup. Tokens are generated tokens (scoring: record tokens) over wall seconds, best of 2
interleaved rounds.

Run: .venv/bin/python benchmarks/bench_stages.py [--profile smoke] [--store DIR] [--tasks 6] [--eval-tasks 32]
(a store where `apsft run` materialized the trace bank; default the profile's store)
"""

from __future__ import annotations

import argparse
import functools
import time

import polars as pl
import torch

from apsft_dagster.core.base_model import base_model_path
from apsft_dagster.core.config import load_config
from apsft_dagster.core.engines.base import GREEDY, GenerationRequest
from apsft_dagster.core.engines.transformers_engine import TransformersEngine
from apsft_dagster.core.evaluation.generations import EVAL_SPLITS, eval_tasks, generate_policy
from apsft_dagster.core.harvest import HarvestTask, harvest_task
from apsft_dagster.core.instruments import ReferenceInstrument
from apsft_dagster.core.layout import TASK_CATALOG, TRACE_BANK, shard_file
from apsft_dagster.core.paths import store_root
from apsft_dagster.core.protocol import (
    BOUNDARY,
    IM_END,
    STOP_TOKENS,
    format_answer,
    format_prompt,
    locate_spans,
    prompt_ids,
)
from apsft_dagster.core.rollouts import r1_rollouts
from apsft_dagster.core.score_bank import score_task
from apsft_dagster.core.seeds import derive_seed
from apsft_dagster.core.store import Store


def new_tokens(out: torch.Tensor, width: int, pad: int) -> int:
    return int((out[:, width:] != pad).sum())


class Bench:
    def __init__(self, profile: str, store_dir: str | None, n_tasks: int, n_eval: int):
        self.config = load_config(profile)
        self.store = Store(store_dir or store_root(profile))
        torch.set_num_threads(self.config.compute.threads)
        path = str(base_model_path(self.config, self.store))
        self.engine = TransformersEngine.load(path, STOP_TOKENS)
        self.tok, self.model = self.engine.tokenizer, self.engine.model
        catalog = self.store.get_parquet(TASK_CATALOG)
        train = catalog.filter(pl.col("split") == "train").sort("task_id").head(n_tasks)
        self.tasks = [HarvestTask(r["task_id"], r["family"], r["level"], r["prompt"], r["answer"])
                      for r in train.iter_rows(named=True)]
        self.traces = {t.task_id: self.store.get_parquet(shard_file(TRACE_BANK, t.task_id)).filter(pl.col("eligible"))
                       for t in self.tasks}
        self.evals = eval_tasks(catalog, EVAL_SPLITS).head(n_eval)

    def _bare_generate(self, prompts: list[list[int]], max_tokens: int, sampling, n: int = 1,
                       seed: int = 0, stops=None) -> int:
        pad, width = self.tok.pad_token_id, max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        knobs = {"do_sample": False} if sampling == GREEDY else {
            "do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k}
        torch.manual_seed(seed)
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens,
                                      num_return_sequences=n, eos_token_id=list(stops or self.engine.stop_token_ids),
                                      pad_token_id=pad, **knobs)
        return new_tokens(out, width, pad)

    # --- harvest
    def harvest(self) -> int:
        seed = self.config.seeds.experiment
        return sum(int(harvest_task(self.engine, self.tok, t, self.config.harvest, seed)["n_tokens"].sum())
                   for t in self.tasks)

    def harvest_bare(self) -> int:
        cfg = self.config.harvest
        return sum(self._bare_generate([list(prompt_ids(self.tok, t.prompt))], cfg.allowance, cfg.sampling,
                                       cfg.samples_per_task, derive_seed(self.config.seeds.experiment, t.task_id,
                                                                         "main")) for t in self.tasks)

    # --- scoring
    def _items(self, task: HarvestTask) -> list[tuple[str, str, str]]:
        x, y = format_prompt(task.prompt), format_answer(task.answer)
        return [(x, "", y)] + [(x, z, y) for z in self.traces[task.task_id].sort("trace_id")["thought"]]

    def scoring(self) -> int:
        instrument = ReferenceInstrument(self.model, self.tok, self.config.scoring.reference_batch_tokens)
        for t in self.tasks:
            score_task(instrument, t.prompt, t.answer, self.traces[t.task_id])
        return self._record_tokens

    @functools.cached_property
    def _record_tokens(self) -> int:
        """Counted once, outside every timed round (both sides tokenize their records themselves)."""
        return sum(len(locate_spans(self.tok, *item).input_ids) for t in self.tasks for item in self._items(t))

    @torch.no_grad()
    def scoring_bare(self) -> int:
        from apsft_dagster.core.scoring import batches_by_length

        base = getattr(self.model, self.model.base_model_prefix)
        limit = self.config.scoring.reference_batch_tokens or 1  # 1: every record alone, as the instrument runs it
        for t in self.tasks:
            records = [locate_spans(self.tok, *item).input_ids for item in self._items(t)]
            for batch in batches_by_length([len(r) for r in records], limit):
                width = max(len(records[i]) for i in batch)
                ids = torch.tensor([records[i] + [self.tok.pad_token_id] * (width - len(records[i])) for i in batch])
                base(input_ids=ids)
        return self._record_tokens

    # --- R1
    def _r1_prompts(self, task: HarvestTask) -> list[list[int]]:
        prefix = format_prompt(task.prompt)
        return [self.tok(prefix + z + BOUNDARY, add_special_tokens=False)["input_ids"]
                for z in self.traces[task.task_id].sort("trace_id")["thought"]]

    def r1(self) -> int:
        total = 0
        for t in self.tasks:
            out = r1_rollouts(self.engine, t.prompt, t.answer, self.traces[t.task_id], self.config.rollouts,
                              self.config.seeds.experiment)
            total += sum(len(self.tok(x, add_special_tokens=False)["input_ids"]) for x in out["rollout_text"])
        return total

    def r1_bare(self) -> int:
        cfg = self.config.rollouts
        total = 0
        for t in self.tasks:
            prompts = self._r1_prompts(t)
            for start in range(0, len(prompts), self.engine.batch_size):
                total += self._bare_generate(prompts[start:start + self.engine.batch_size], cfg.max_new_tokens,
                                             cfg.sampling)
        return total

    def r1_one_at_a_time(self) -> int:
        cfg, t = self.config.rollouts, self.tasks[0]
        return sum(len(self.engine.one_at_a_time(GenerationRequest(tuple(p), 1, cfg.max_new_tokens, 7 + i),
                                                 cfg.sampling)[0].token_ids)
                   for i, p in enumerate(self._r1_prompts(t)[:16]))

    # --- Stage B samples and evaluation
    def _policy(self, sampling, n: int, seeds=None) -> int:
        frame, figures = generate_policy(self.engine, self.evals, "bench", base_model_path(self.config, self.store),
                                         self.config.evaluation.allowance, None, sampling=sampling, n=n, seeds=seeds)
        return figures["new_tokens"]

    def stage_b(self) -> int:
        seeds = [derive_seed(1, "bench", t) for t in self.evals["task_id"]]
        return self._policy(self.config.harvest.sampling, self.config.stage_b.k_samples, seeds)

    def stage_b_bare(self) -> int:
        end = self.tok.convert_tokens_to_ids(IM_END)
        prompts = [list(prompt_ids(self.tok, p)) for p in self.evals["prompt"]]
        k, per = self.config.stage_b.k_samples, max(1, self.engine.batch_size // self.config.stage_b.k_samples)
        return sum(self._bare_generate(prompts[s:s + per], self.config.evaluation.allowance,
                                       self.config.harvest.sampling, k, s, (end,))
                   for s in range(0, len(prompts), per))

    def stage_b_one_at_a_time(self) -> int:
        end = self.tok.convert_tokens_to_ids(IM_END)
        k = self.config.stage_b.k_samples
        return sum(len(c.token_ids) for i, p in enumerate(self.evals["prompt"][:8]) for c in self.engine.one_at_a_time(
            GenerationRequest(prompt_ids(self.tok, p), k, self.config.evaluation.allowance, i, (end,)),
            self.config.harvest.sampling))

    def evaluation(self) -> int:
        return self._policy(GREEDY, 1)

    def evaluation_bare(self) -> int:
        end = self.tok.convert_tokens_to_ids(IM_END)
        prompts = [list(prompt_ids(self.tok, p)) for p in self.evals["prompt"]]
        return sum(self._bare_generate(prompts[s:s + self.engine.batch_size], self.config.evaluation.allowance,
                                       GREEDY, 1, 0, (end,)) for s in range(0, len(prompts), self.engine.batch_size))


def rate(run) -> float:
    start = time.perf_counter()
    tokens = run()
    return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="smoke")
    parser.add_argument("--store", default=None)
    parser.add_argument("--tasks", type=int, default=6, help="train tasks for harvest, scoring and R1")
    parser.add_argument("--stages", default="harvest,scoring,r1,stage_b,evaluation", help="comma-separated")
    parser.add_argument("--eval-tasks", type=int, default=32, help="evaluation tasks for Stage B and evaluation")
    args = parser.parse_args()
    bench = Bench(args.profile, args.store, args.tasks, args.eval_tasks)
    print(f"profile {args.profile}: {len(bench.tasks)} train tasks, {bench.evals.height} evaluation tasks, "
          f"{torch.get_num_threads()} threads")
    print("| stage | stage tokens/s | bare tokens/s | ratio (target >= 0.8) | one at a time tokens/s |")
    print("|---|---|---|---|---|")
    for name in args.stages.split(","):
        stage, bare = getattr(bench, name), getattr(bench, f"{name}_bare")
        rates = {"stage": [], "bare": []}
        for _ in range(2):
            rates["bare"].append(rate(bare))
            rates["stage"].append(rate(stage))
        single = getattr(bench, f"{name}_one_at_a_time", None)
        alone = f"{rate(single):,.0f}" if single else "-"
        s, b = max(rates["stage"]), max(rates["bare"])
        print(f"| {name} | {s:,.0f} | {b:,.0f} | {s / b:.2f}x | {alone} |", flush=True)


if __name__ == "__main__":
    main()
