"""Shard keys in a store against the settings of this run: keep, make, remake, or refuse.

A shard whose key's settings equal this run's is kept; one whose upstream shard changed since it was
made is stale and remade. A shard made under other settings is never kept silently: unless `--recompute`
(`APSFT_RECOMPUTE=1`) asks for it to be remade, or a recorded amendment covers every setting that
differs (`apsft amend --covers`: only fields that decide no byte, core/bank_keys.AMENDABLE), the run
refuses before writing anything, naming each changed setting with its old and new value and the three
ways out. A shard with no key (made before keys were recorded) is refused the same way, and so is a key
that no longer matches its receipt (a hand edit).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import polars as pl

from apsft_dagster.core import bank_keys
from apsft_dagster.core.bank_keys import UPSTREAM, changes, hashable, shard_key, shown, task_part
from apsft_dagster.core.errors import HashMismatchError, KeyMismatchError, ParityError
from apsft_dagster.core.layout import BASE_MODEL_REPORT, PARITY_GATE, TASK_CATALOG, key_file, shard_file
from apsft_dagster.core.store import json_bytes, sha256_bytes

RECOMPUTE_ENV = "APSFT_RECOMPUTE"
NO_KEY = ("key", "(none: made before shard keys were recorded)", "(this run's settings)")


def recompute_asked() -> bool:
    return os.environ.get(RECOMPUTE_ENV, "") not in ("", "0")


def scoring_instrument(store, config) -> str:
    """The instrument that scores the bank now, by the parity gate's rule (core/parity.py)."""
    from apsft_dagster.core.parity import scoring_instrument as rule

    report = store.get_json(PARITY_GATE) if store.exists(PARITY_GATE) else None
    try:
        return rule(report, config)[0]
    except ParityError:  # no gate yet, or one that stops the run: score_bank itself says so, by name
        return config.scoring.instrument


def inherited_index(config) -> dict | None:
    """The inherited bank's index entries (task -> entry), read without verifying the shards (the
    import verifies them), or None when the profile inherits nothing."""
    path = config.harvest.inherited_index
    if path is None:
        return None
    try:
        return json.loads(Path(path).read_bytes())["tasks"]
    except (OSError, ValueError, KeyError):
        return {}  # the import itself refuses a missing or malformed index, naming it


class Keyer:
    """This run's key for each shard of `bank` in `store`, and what to do with a shard already there."""

    def __init__(self, store, config, bank: str):
        self.store, self.config, self.bank = store, config, bank
        fingerprint = store.get_json(BASE_MODEL_REPORT)["fingerprint"] if store.exists(BASE_MODEL_REPORT) else None
        instrument = scoring_instrument(store, config) if bank != bank_keys.TRACE_BANK else None
        self.made_with = bank_keys.settings(config, bank, fingerprint, instrument)
        self.fingerprint = fingerprint
        self.inherited = inherited_index(config) if bank == bank_keys.TRACE_BANK else None
        self.covered = covered_changes(store)

    def settings_for(self, task_id: str, old: dict | None = None) -> dict:
        """This run's settings for the task's shard; for one imported (`old`: its key's settings), this run's
        settings for importing that same file (`apsft import-traces`), so a change of what judged it shows."""
        if self.inherited is not None and task_id in self.inherited:
            return bank_keys.inherited_settings(self.config.harvest.inherited_index_sha256)
        if old is not None and bank_keys.IMPORTED in old:
            return bank_keys.imported_settings(self.config, self.fingerprint, old[bank_keys.IMPORTED])
        return self.made_with

    def expected(self, task: dict, made_by: dict | None = None) -> dict:
        inputs = {up: self.store.verify(shard_file(up, task["task_id"])) for up in UPSTREAM[self.bank]}
        return shard_key(self.bank, self.settings_for(task["task_id"]), task_part(task, inputs), made_by)

    def stored(self, task_id: str) -> dict | None:
        """The key recorded beside a shard (receipt verified), or None when there is none."""
        name = key_file(self.bank, task_id)
        if not self.store.exists(name):
            return None
        try:
            return json.loads(self.store.get_bytes(name))
        except HashMismatchError as exc:
            raise KeyMismatchError(f"{exc}\nA shard key is written by the run that made the shard, never by hand; "
                                   "nothing was written. Restore the key file, or remake the bank (`apsft run "
                                   "--recompute`)") from None

    def decide(self, task: dict, recompute: bool | None = None, inputs: bool = True,
               old: dict | None = None) -> tuple[str, list]:
        """('make' | 'keep' | 'stale' | 'recompute' | 'refuse', the settings that differ); `recompute`
        defaults to whether this run asked for it (`APSFT_RECOMPUTE`); `inputs=False` leaves the upstream
        shards unread (a shard the bank's own hash-parity check reports is no reason to stop here); `old`:
        the shard's key where the caller has read it already."""
        task_id, recompute = task["task_id"], recompute_asked() if recompute is None else recompute
        if not self.store.exists(shard_file(self.bank, task_id)):
            return "make", []
        old = old if old is not None else self.stored(task_id)
        if old is None:
            return ("recompute", [NO_KEY]) if recompute else ("refuse", [NO_KEY])
        differ = changes(old["settings"], self.settings_for(task_id, old["settings"]))
        if differ and recompute:
            return "recompute", differ
        if differ and not all(c in self.covered for c in differ):
            return "refuse", differ
        if not inputs:
            return "keep", []
        new = self.expected(task)
        if old["task"] != new["task"]:
            return "stale", []
        return "keep", []

    def write(self, task: dict) -> str:
        """Record this run's key for `task` (before its shard is written); an inherited shard's carries the key
        it was exported with."""
        made_by = None
        if self.inherited is not None and task["task_id"] in self.inherited:
            made_by = exported_key(self.config.harvest.inherited_index, self.inherited[task["task_id"]])
        return self.store.put_json(key_file(self.bank, task["task_id"]), self.expected(task, made_by))

    def keyed(self, make: Callable[[dict, str], tuple]) -> Callable[[dict, str], tuple]:
        """`make` that records the task's key first (a kill between the two leaves a key without a shard,
        which counts as nothing: the shard is made again and the key rewritten)."""
        def make_keyed(task: dict, name: str) -> tuple:
            self.write(task)
            return make(task, name)
        return make_keyed


def exported_key(index_path: str, entry: dict) -> dict | None:
    """The key an exported bank carries for a task (its index entry's `key`, beside the index; verified
    against the entry's `key_sha256` by the import, core/bank.InheritedBank), if any."""
    return json.loads((Path(index_path).parent / entry["key"]).read_bytes()) if entry.get("key") else None


def covered_changes(store) -> set[tuple[str, object, object]]:
    """(field, old, new) of every change a recorded amendment covers (`apsft amend --covers`)."""
    from apsft_dagster.core.amendments import read_log

    return {(name, hashable(c["from"]), hashable(c["to"]))
            for record in read_log(store) for name, c in (record.get("covers") or {}).items()}


def store_changes(store, config, banks: Iterable[str] = bank_keys.BANKS) -> dict[str, list]:
    """For each bank, {(setting, old, new): task ids} of its shards made under other settings than this run's
    (and not covered by an amendment): what `apsft run` refuses, or with `--recompute` remakes, before anything
    is written."""
    if not store.exists(TASK_CATALOG):
        return {}
    catalog = {r["task_id"]: r for r in store.get_parquet(TASK_CATALOG).select("task_id", "prompt", "answer")
               .iter_rows(named=True)}
    found = {}
    for bank in banks:
        shards = sorted(p.name.removesuffix(".parquet") for p in store.local_files(f"{bank}/shards/*.parquet"))
        keyer, differ = Keyer(store, config, bank), {}
        for task_id in shards:
            if task_id not in catalog:
                continue
            verdict, changed = keyer.decide(catalog[task_id], recompute=False, inputs=False)
            if verdict == "refuse":
                for change in changed:
                    differ.setdefault(change, []).append(task_id)
        if differ:
            found[bank] = differ
    return found


def preflight(store, config, recompute: bool) -> tuple[str | None, list[str]]:
    """`apsft run`'s check of the banks before anything is written: (the refusal or None, lines saying what
    `--recompute` will remake)."""
    found = store_changes(store, config)
    if found and not recompute:
        return refusal(found), []
    return None, [f"{bank}: remaking {len({t for ts in differ.values() for t in ts})} shards made under other "
                  f"settings ({', '.join(f'{n} {shown(a)} → {shown(b)}' for n, a, b in list(differ)[:3])})"
                  for bank, differ in found.items()]


def _said(change: tuple) -> str:
    name, old, new = change
    if change == NO_KEY:
        return "no key (made before shard keys were recorded)"
    return f"{name} {shown(old)} → {shown(new)}"


def refusal(found: dict[str, dict]) -> str:
    """The refusal: each changed setting with its old and new value, the banks and shards made under the old
    one, and the three ways out."""
    by_change: dict[tuple, list[str]] = {}
    for bank, differ in found.items():
        for change, tasks in differ.items():
            by_change.setdefault(change, []).append(f"{bank} {len(tasks)} shards (e.g. {tasks[0]})")
    lines = ["the store holds evidence made under other settings than this run's; nothing was written:"]
    lines += [f"  {_said(change)}: {', '.join(banks)}" for change, banks in by_change.items()]
    lines += ["Ways out: run on a new store (`--store DIR`); remake the affected banks (`apsft run --recompute`); "
              "or, for a field that decides no byte of a shard, record an amendment that covers it (`apsft amend "
              "TEXT --covers FIELD`)."]
    return "\n".join(lines)


def check_bank(keyer: Keyer, tasks: pl.DataFrame) -> dict[str, str]:
    """Each task's decision (task id -> keep, make, stale or recompute); KeyMismatchError naming every
    change when any shard would be refused (before anything is written)."""
    decisions, differ = {}, {}
    for task in tasks.sort("task_id").iter_rows(named=True):
        verdict, changed = keyer.decide(task)
        decisions[task["task_id"]] = verdict
        for change in changed if verdict == "refuse" else ():
            differ.setdefault(change, []).append(task["task_id"])
    if differ:
        raise KeyMismatchError(refusal({keyer.bank: differ}))
    return decisions


def sealed_keys(store, config, bank: str, index: dict) -> tuple[list[str], dict]:
    """What the seal checks and lists of a bank's keys: problems (a shard without a key, a key that is not
    the index's, one made under other settings than this config's and not covered by an amendment, one made
    from another upstream shard than the bank holds) and the bank's distinct settings with their shard counts."""
    problems, distinct = [], {}
    catalog = {r["task_id"]: r for r in store.get_parquet(TASK_CATALOG).select("task_id", "prompt", "answer")
               .iter_rows(named=True)}
    keyer = Keyer(store, config, bank)
    for task_id in sorted(index):
        entry, name = index[task_id], key_file(bank, task_id)
        if "key_sha256" not in entry or not store.exists(name):
            problems.append(f"{store.path(shard_file(bank, task_id))}: no key (made before shard keys were recorded); "
                            "remake the bank (`apsft run --recompute`)")
            continue
        data, actual = store.read(name)
        if actual != entry["key_sha256"]:
            problems.append(f"{store.path(name)}: SHA-256 {actual}, the bank index records {entry['key_sha256']}")
            continue
        key = json.loads(data)
        digest = sha256_bytes(json_bytes(key["settings"]))
        distinct.setdefault(digest, {"settings": key["settings"], "shards": 0})["shards"] += 1
        if task_id in catalog:
            verdict, differ = keyer.decide(catalog[task_id], recompute=False, old=key)
            if verdict == "refuse":
                problems += [f"{store.path(name)}: {n} {shown(a)} → {shown(b)} (made under other settings)"
                             for n, a, b in differ]
            elif verdict == "stale":
                problems.append(f"{store.path(name)}: made from another upstream shard than the bank holds")
    return problems, {"settings": [distinct[d] for d in sorted(distinct)], "shards": len(index)}


def covers(store, config, fields: list[str]) -> dict:
    """{field: {"from": old, "to": new}} for `apsft amend --covers FIELD,...`: each a setting some shard was made
    under with another value than this config's. AmendmentError (nothing recorded) for a field that decides bytes
    (only a recompute answers it), one frozen by the design anchor, or one no shard differs in."""
    from apsft_dagster.core.anchor import frozen, read_anchor
    from apsft_dagster.core.errors import AmendmentError

    found = {(name, old, new) for differ in store_changes(store, config).values() for name, old, new in differ}
    anchor = read_anchor(store)
    out = {}
    for field in fields:
        if field not in bank_keys.AMENDABLE:
            raise AmendmentError(f"--covers {field}: it decides the bytes of the shards made under it, so an amendment "
                                 "cannot keep them under another value; nothing was recorded. Remake them (`apsft run "
                                 f"--recompute`) or use a new store. Fields an amendment may cover: "
                                 f"{', '.join(bank_keys.AMENDABLE)}")
        if anchor is not None and frozen(field):
            raise AmendmentError(f"--covers {field}: frozen by the design anchor of {anchor['date']} (a gate's "
                                 "threshold or design is never relaxed after it); nothing was recorded. Set it back "
                                 "to its frozen value, or start a new study on a new store")
        matched = sorted((old, new) for name, old, new in found if name == field)
        if not matched:
            raise AmendmentError(f"--covers {field}: no shard in this store was made with another value of it than "
                                 "this config's; nothing to cover, nothing was recorded")
        old, new = matched[0]
        out[field] = {"from": list(old) if isinstance(old, tuple) else old, "to": list(new) if isinstance(new, tuple)
                      else new}
    return out
