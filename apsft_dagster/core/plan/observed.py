"""What a store (and an inherited bank) already holds, for the plan: read and verified, never written.

The trace bank's shards give every trace's lengths (generated tokens, thought tokens, the whole
record) for the tasks they hold; an inherited bank (`harvest.inherited_index`) gives them for
the tasks it will import. The other stages' artifacts say what is done: the parity receipt,
score and R1 shards, the SFT manifest (its forward tokens), adapter, merge and probe receipts,
evaluation generations (their completion tokens), Stage B's plan, and the amendment log's
latest budget for this selection (the budget gate's own rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from apsft_dagster.core.bank import InheritedBank, read_shards, stored_tasks
from apsft_dagster.core.errors import ApsftError
from apsft_dagster.core.harvest import TRACE_SCHEMA
from apsft_dagster.core.layout import (
    BASE_MODEL_REPORT,
    PARITY_GATE,
    R1_BANK,
    SCORE_BANK,
    SFT_MANIFEST,
    STAGE_B_PLAN,
    TRACE_BANK,
    adapter_report,
    eval_generations,
    merged_report,
    probe_report,
    stage_b_generations,
    stage_b_samples,
)
from apsft_dagster.core.policies import policy_keys, stage_a_eval_keys
from apsft_dagster.core.store import Store
from apsft_dagster.core.task_file.source import train_task_ids
from apsft_dagster.core.training.gate import budget_amendment

BANK_COLUMNS = ["task_id", "n_tokens", "n_thought_tokens", "n_record_tokens", "eligible"]
SHARD_SCHEMA = {c: TRACE_SCHEMA[c] for c in BANK_COLUMNS}
EMPTY_BANK = pl.DataFrame(schema={**SHARD_SCHEMA, "origin": pl.String})


@dataclass
class Observed:
    """The plan's view of what exists: every field empty when nothing has run."""

    bank: pl.DataFrame = field(default_factory=lambda: EMPTY_BANK)  # BANK_COLUMNS + origin, one row per trace
    inherited: frozenset[str] = frozenset()  # train tasks the inherited bank imports (never generated)
    scored: frozenset[str] = frozenset()  # train tasks with a score shard
    rolled_out: frozenset[str] = frozenset()  # train tasks with an R1 shard
    parity: bool = False
    base_model: bool = False
    manifest: dict | None = None
    adapters: frozenset[str] = frozenset()  # policies (either seed) with a training receipt
    merged: frozenset[str] = frozenset()  # policies merged and probed
    generations: dict[str, int] = field(default_factory=dict)  # Stage A policy -> completion tokens
    stage_b: dict | None = None  # Stage B's plan, once Stage A's analysis wrote it
    stage_b_done: frozenset[str] = frozenset()  # Stage B policies with their generations (and samples)
    amendment: dict | None = None  # the latest budget amendment valid for this selection
    notes: list[str] = field(default_factory=list)


def observe(config, store: Store | None) -> Observed:
    """Everything the plan reads from `store` (None: nothing has run) and the inherited bank."""
    seen = Observed()
    frames = [EMPTY_BANK, _inherited(config, seen)]
    if store is not None:
        tasks = train_task_ids(config)
        frames.append(_shards(store, [t for t in tasks if t not in seen.inherited]))
        seen.scored = frozenset(stored_tasks(store, SCORE_BANK, tasks))
        seen.rolled_out = frozenset(stored_tasks(store, R1_BANK, tasks))
        _stages(config, store, seen)
    seen.bank = pl.concat(frames, how="vertical_relaxed")
    return seen


def _shards(store: Store, tasks: list[str]) -> pl.DataFrame:
    """The trace bank's lengths for the tasks it holds, each shard verified against its receipt."""
    frame = read_shards(store, TRACE_BANK, stored_tasks(store, TRACE_BANK, tasks), schema=SHARD_SCHEMA)
    return frame.with_columns(origin=pl.lit("store"))


def _inherited(config, seen: Observed) -> pl.DataFrame:
    """The inherited bank's lengths for the train tasks it holds, verified as the import verifies
    it; a bank that would not import is noted and priced as generated."""
    cfg = config.harvest
    if cfg.inherited_index is None:
        return EMPTY_BANK
    try:
        bank = InheritedBank(cfg.inherited_index, cfg.inherited_index_sha256, TRACE_SCHEMA)
    except ApsftError as exc:
        seen.notes.append(f"inherited bank not usable, its tasks priced as generated: {exc}")
        return EMPTY_BANK
    tasks = [t for t in train_task_ids(config) if t in bank]
    seen.inherited = frozenset(tasks)
    root = Path(cfg.inherited_index).parent
    frames = [pl.read_parquet(root / bank.tasks[t]["shard"], columns=BANK_COLUMNS) for t in tasks]
    return pl.concat([pl.DataFrame(schema=SHARD_SCHEMA), *frames]).with_columns(origin=pl.lit("inherited bank"))


def _completion_tokens(store: Store, name: str) -> int:
    return int(store.get_parquet(name)["token_ids"].list.len().sum())


def _stages(config, store: Store, seen: Observed) -> None:
    """What the stages after the harvest left in the store."""
    seen.parity, seen.base_model = store.exists(PARITY_GATE), store.exists(BASE_MODEL_REPORT)
    policies = policy_keys(config)
    seen.adapters = frozenset(p for p in policies if store.exists(adapter_report(p)))
    seen.merged = frozenset(p for p in policies if store.exists(merged_report(p)) and store.exists(probe_report(p)))
    seen.generations = {p: _completion_tokens(store, eval_generations(p)) for p in stage_a_eval_keys(config)
                        if store.exists(eval_generations(p))}
    if store.exists(SFT_MANIFEST):
        seen.manifest = store.get_json(SFT_MANIFEST)
        seen.amendment = budget_amendment(store, seen.manifest)
    if store.exists(STAGE_B_PLAN):
        seen.stage_b = store.get_json(STAGE_B_PLAN)
        sampled = set(seen.stage_b["sampled_policies"])
        seen.stage_b_done = frozenset(p for p in seen.stage_b["greedy_policies"]
                                      if store.exists(stage_b_generations(p))
                                      and (p not in sampled or store.exists(stage_b_samples(p))))
