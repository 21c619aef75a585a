"""`apsft import-traces` into a store: every check first, then each covered task's key and trace shard.

The store must be the profile's (core/store_owner.py), hold its task catalog and base model (the
tokenizer; `apsft run --to tasks_and_model_job`), and not be sealed yet. Each task the file covers gets
the harvest's shard (TRACE_SCHEMA rows, core/trace_import.py) and a key (core/bank_keys.py) whose settings
name the file (`imported`: its SHA-256, what its rows lack) instead of generation settings; the trace_bank
stage keeps those shards (core/bank_key_check.py) and harvests only the train tasks the file lacks. A task
that already has a shard is refused, unless the import would write the very same bytes.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import polars as pl

from apsft_dagster.core.bank_key_check import inherited_index
from apsft_dagster.core.bank_keys import TRACE_BANK, imported_settings, shard_key, task_part
from apsft_dagster.core.base_model import load_tokenizer
from apsft_dagster.core.errors import TraceImportError
from apsft_dagster.core.harvest import HarvestTask, batch_plan
from apsft_dagster.core.layout import BASE_MODEL_REPORT, EVIDENCE_SEAL, TASK_CATALOG, key_file, shard_file
from apsft_dagster.core.store import json_bytes, parquet_bytes, sha256_bytes
from apsft_dagster.core.store_owner import refuse_another
from apsft_dagster.core.task_file.source import train_task_ids  # the builders' or the task file's
from apsft_dagster.core.text_protocol import for_config
from apsft_dagster.core.trace_import import match, missing, read_rows, refuse, task_shard

FIRST = "`apsft run --to tasks_and_model_job`"


def import_traces(path: str | Path, config, store, location: str) -> dict:
    """Import the file's traces into `store` (at `location`) and return what was done; TraceImportError (or the
    store's own refusal) naming the file, row, field or task, with nothing written, when anything is wrong."""
    path = Path(path)
    _check_store(config, store, location)
    rows, file_sha256 = read_rows(path)
    protocol = for_config(config)  # the run's markers and prompt rendering, as the harvest uses them
    catalog = store.get_parquet(TASK_CATALOG)
    items = match(path, rows, catalog, protocol.format_prompt, inherited_index(config))
    tasks = {r["task_id"]: r for r in catalog.iter_rows(named=True)}
    by_task = defaultdict(list)
    for item in items:
        by_task[item.task_id].append(item)
    tokenizer, cfg = load_tokenizer(config, store), config.harvest
    frames, made_from, problems = {}, {}, []
    for task_id, its in sorted(by_task.items()):
        task = tasks[task_id]
        frame, beyond = task_shard(tokenizer, protocol, HarvestTask(task_id, task["family"], task["level"],
                                                                   task["prompt"], task["answer"]), its, cfg)
        frames[task_id], made_from[task_id] = frame, dict(zip(frame["trace_id"], (i.where for i in its)))
        problems += [f"{path}: {item.where}: {_beyond(task_id, frame, cfg)}" for item in beyond]
    refuse(problems, "Leave those rows out (the harvest keeps no more), or give the profile another batch plan "
                     "(harvest.samples_per_task, topup_batches, topup_size) on a new store.")
    if not any(frame["closed"].any() for frame in frames.values()):
        raise TraceImportError(f"{path}: no completion closes its thought ({protocol.think_close!r}): written with "
                               "special tokens skipped? (vLLM: SamplingParams(skip_special_tokens=False)); nothing "
                               "was written")
    settings = imported_settings(config, store.get_json(BASE_MODEL_REPORT)["fingerprint"],
                                 {"file_sha256": file_sha256, **missing(frames)})
    keys = {t: shard_key(TRACE_BANK, settings, task_part(tasks[t], {}), {"rows": made_from[t]}) for t in frames}
    kept = _already_there(store, frames, keys)
    for task_id in sorted(set(frames) - set(kept)):  # the key first, as the harvest writes it (core/bank_key_check.py)
        store.put_json(key_file(TRACE_BANK, task_id), keys[task_id])
        store.put_parquet(shard_file(TRACE_BANK, task_id), frames[task_id])
    bank, source = pl.concat(frames.values()), settings["imported"]
    return {"file": str(path), "sha256": file_sha256, "tasks": len(frames), "kept": kept, "traces": bank.height,
            "eligible": int(bank["eligible"].sum()),
            "excluded": sorted(bank.filter("task_excluded")["task_id"].unique()),
            "missing": sorted(source["missing"]), "recomputed": sorted(source["recomputed"]),
            "to_harvest": [t for t in train_task_ids(config) if not store.exists(shard_file(TRACE_BANK, t))]}


def _check_store(config, store, location: str) -> None:
    refuse_another(store, config, location)  # StoreOwnerError: a store of another profile
    for name, what in ((TASK_CATALOG, "task catalog"), (BASE_MODEL_REPORT, "base model")):
        if not store.exists(name):
            raise TraceImportError(f"{store.path(name)}: no {what} yet (the import matches the store's catalog and "
                                   f"tokenizes with the base model's tokenizer); run {FIRST} on this store first. "
                                   "Nothing was written")
    if store.exists(EVIDENCE_SEAL):
        raise TraceImportError(f"{store.path(EVIDENCE_SEAL)}: this store's evidence is sealed; traces enter before "
                               "the seal. Import into a new store (then `apsft run`); nothing was written")


def _beyond(task_id: str, frame: pl.DataFrame, cfg) -> str:
    """Why a completion of `task_id` is beyond what the harvest keeps."""
    plan = ", ".join(f"{batch} {n}" for batch, n in batch_plan(cfg))
    eligible = int(frame["eligible"].sum())
    why = (f"{eligible} of the {frame.height} before it are eligible, and the harvest adds a top-up batch only "
           f"while fewer than {cfg.min_eligible} are" if eligible >= cfg.min_eligible
           else f"the harvest's batches ({plan}) hold no more")
    return f"task {task_id}: beyond the harvest's allowance: {why}"


def _already_there(store, frames: dict[str, pl.DataFrame], keys: dict[str, dict]) -> list[str]:
    """Tasks whose shard and key in the store are the bytes this import would write (kept); TraceImportError for a
    task with any other shard there (harvested, inherited, or imported from another file or under other settings)."""
    kept, problems = [], []
    for task_id in sorted(frames):
        shard, key = shard_file(TRACE_BANK, task_id), key_file(TRACE_BANK, task_id)
        if not store.exists(shard):
            continue
        same = store.verify(shard) == sha256_bytes(parquet_bytes(frames[task_id])) and store.exists(key) and \
            store.verify(key) == sha256_bytes(json_bytes(keys[task_id]))
        if same:
            kept.append(task_id)
        else:
            problems.append(f"{store.path(shard)}: task {task_id} already has a trace shard (harvested, inherited or "
                            "imported from another file or under other settings)")
    refuse(problems, "Import into a new store, or leave those tasks out of the file.")
    return kept
