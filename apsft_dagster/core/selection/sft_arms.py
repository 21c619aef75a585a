"""The six SFT datasets (docs/PROTOCOL.md §9: output per arm) and their manifest.

A training record is the target task's prompt, the source trace's thought, the boundary and the
target task's canonical answer (`format_record`): for every arm but potential_shuffle target and
source are the same task. Forward tokens are counted on that exact record with the base model's
tokenizer, capped at `training.max_length`, times `training.epochs`. Files are gzip JSON lines
with sorted keys and mtime 0, so a rerun writes the same bytes; the manifest (each file's
SHA-256, counts, dose and a device-hour envelope) is the experiment's identity.
"""

from __future__ import annotations

import polars as pl

from apsft_dagster.core.balance import cell_problems, split_cells, tasks_per_cell
from apsft_dagster.core.bank import read_shards
from apsft_dagster.core.config import Config, Split
from apsft_dagster.core.layout import R1_BANK, SCORE_BANK, TRACE_BANK, arm_file
from apsft_dagster.core.selection.arms import ARMS, arms_with
from apsft_dagster.core.selection.rules import ROWS_PER_TASK, select_arms
from apsft_dagster.core.store import Store, jsonl_gz_bytes, sha256_bytes
from apsft_dagster.core.task_file.source import train_task_ids
from apsft_dagster.core.text_protocol import active

TEXT_COLUMNS = ("prompt", "thought", "answer")  # in the JSONL, not in the provenance Parquet


def load_candidates(store: Store, task_ids: list[str]) -> pl.DataFrame:
    """select_arms' input from the sealed banks: every trace, gains and R1 label where scored."""
    traces = read_shards(store, TRACE_BANK, task_ids,
                         ["task_id", "family", "level", "trace_id", "thought", "n_thought_tokens", "eligible"])
    scores = read_shards(store, SCORE_BANK, task_ids, ["trace_id", "answer_gain", "joint_gain"])
    labels = read_shards(store, R1_BANK, task_ids, ["trace_id", "success"])
    return (traces.join(scores, on="trace_id", how="left")
            .join(labels.rename({"success": "r1_success"}), on="trace_id", how="left")
            .with_columns(pl.col("r1_success").fill_null(False)))


def with_records(frame: pl.DataFrame, catalog: pl.DataFrame, tokenizer, max_length: int) -> pl.DataFrame:
    """Attach the target task's prompt and answer and count the record's tokens."""
    rows = frame.join(catalog.select("task_id", "prompt", "answer"), on="task_id", how="left", maintain_order="left")
    records = [active().format_record(p, t, a) for p, t, a in rows.select("prompt", "thought", "answer").iter_rows()]
    lengths = [len(ids) for ids in tokenizer(records, add_special_tokens=False)["input_ids"]] if records else []
    return rows.with_columns(pl.Series("n_record_tokens", lengths, dtype=pl.Int64),
                             pl.Series("n_forward_tokens", [min(n, max_length) for n in lengths], dtype=pl.Int64),
                             pl.int_range(pl.len()).alias("row"))


def build_arms(store: Store, config: Config, catalog: pl.DataFrame, tokenizer) -> dict[str, pl.DataFrame]:
    """Select all six arms from the sealed banks (balance asserted inside) and build their records."""
    arms = select_arms(load_candidates(store, train_task_ids(config)), seed=config.seeds.experiment,
                       top_k=config.selection.top_k, band=config.selection.band, per_cell=config.tasks.train.per_cell)
    return {arm: with_records(arms[arm], catalog, tokenizer, config.training.max_length) for arm in ARMS}


def arm_bytes(rows: pl.DataFrame) -> bytes:
    return jsonl_gz_bytes(rows.to_dicts())


def provenance(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.drop(*TEXT_COLUMNS)


def manifest_entry(arm: str, rows: pl.DataFrame, digest: str, config: Config) -> dict:
    epochs, envelope = config.training.epochs, config.training.throughput_tokens_per_s
    forward = int(rows["n_forward_tokens"].sum()) * epochs
    repeats = rows.group_by("source_trace_id").len()["len"]
    return {
        "arm": arm, "file": arm_file(arm), "sha256": digest, "rows": rows.height,
        "tasks": rows["task_id"].n_unique(), "cells": rows.select("family", "level").n_unique(),
        "unique_sources": rows["source_trace_id"].n_unique(), "max_rows_per_source": int(repeats.max()),
        "mode_counts": dict(sorted(rows.group_by("mode").len().iter_rows())),
        "thought_tokens": int(rows["n_thought_tokens"].sum()), "epochs": epochs,
        "truncated_rows": int((rows["n_record_tokens"] > config.training.max_length).sum()),
        "forward_tokens": forward,
        "device_hours": {"low": round(forward / envelope.high / 3600, 4),
                         "high": round(forward / envelope.low / 3600, 4)},
    }


def manifest(entries: list[dict], seal_sha256: str, config: Config) -> dict:
    return {"format": "apsft-sft-manifest/1", "profile": config.sealed_profile, "config_digest": config.sealed_digest,
            "evidence_seal_sha256": seal_sha256, "arms": entries,
            "forward_tokens": sum(e["forward_tokens"] for e in entries),
            "throughput_tokens_per_s": config.training.throughput_tokens_per_s.model_dump()}


def cell_balance_problems(rows: pl.DataFrame, split: Split) -> list[str]:
    """Every balanced arm (all but success_rft, whose support is what R1 found): each task two
    rows, each cell of the train split its configured tasks."""
    balanced = rows.filter(pl.col("arm").is_in(arms_with(balanced=True)))
    per_task = balanced.group_by("arm", "family", "level", "task_id").len()
    problems = [f"{r['arm']} {r['task_id']}: {r['len']} rows, expected {ROWS_PER_TASK}"
                for r in per_task.filter(pl.col("len") != ROWS_PER_TASK).sort("arm", "task_id").iter_rows(named=True)]
    for arm in sorted(set(balanced["arm"].to_list())):
        counts = tasks_per_cell(per_task.filter(pl.col("arm") == arm))
        problems += [f"{arm} {p}" for p in cell_problems(counts, split_cells(split))]
    return problems


def manifest_problems(rows: dict[str, pl.DataFrame], stored: dict[str, str], rerun: dict[str, pl.DataFrame],
                      split: Split) -> dict[str, list[str]]:
    """The manifest's checks: per-cell balance, rows per arm (two per train task), and that a
    rerun of selection gives files with the stored SHA-256s."""
    want = ROWS_PER_TASK * split.total
    return {
        "per_cell_balance": cell_balance_problems(pl.concat(rows.values(), how="diagonal_relaxed"), split),
        "rows_per_arm": [f"{a}: {r.height} rows, expected {want}" for a, r in rows.items() if r.height != want],
        "byte_identical_rerun": [f"{arm_file(a)}: stored {stored[a]}, rerun {digest_of(rerun[a])}"
                                 for a in rows if digest_of(rerun[a]) != stored[a]],
    }


def digest_of(rows: pl.DataFrame) -> str:
    return sha256_bytes(arm_bytes(rows))
