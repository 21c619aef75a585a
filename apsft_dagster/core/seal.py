"""The evidence seal (docs/PROTOCOL.md §8): validate the whole bank, then bind what selection uses.

`validate_bank` re-reads every raw, score and R1 shard once (read-only): SHA-256 against both
its receipt and its bank index, task scope (the index covers exactly the train tasks, every row
of a shard belongs to its task), unique trace ids, and the joins raw(eligible) = score = R1.
`seal_document` binds the three index digests (each index lists its shards' keys), the keys it
covers (each bank's distinct settings: core/bank_keys.py), the eligible set, the config digest (and, by name,
the task file `tasks.source` with its SHA-256 where the tasks come from one), the
base model fingerprint, the SHA-256 of the code that selects and trains, and the classified
amendment log. A shard without a key, with a key its index does not record, or made under other
settings than this config's (and no amendment covering them) is a problem: nothing is sealed. It
holds no timestamp, so sealing twice writes the same bytes.
`verify_seal` is the fail-closed gate selection runs first: it re-hashes every sealed shard and
shard key and names whatever changed.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl

from apsft_dagster.core import amendments
from apsft_dagster.core.anchor import read_anchor
from apsft_dagster.core.balance import exactly_once
from apsft_dagster.core.bank_key_check import sealed_keys
from apsft_dagster.core.config import Config
from apsft_dagster.core.errors import HashMismatchError, MissingArtifactError, SealError
from apsft_dagster.core.layout import (
    AMENDMENT_LOG,
    BASE_MODEL_REPORT,
    EVIDENCE_SEAL,
    R1_BANK,
    SCORE_BANK,
    TRACE_BANK,
    index_file,
    key_file,
    shard_file,
)
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.store import Store, sha256_bytes, sha256_file
from apsft_dagster.core.task_file.source import train_task_ids

FORMAT = "apsft-evidence-seal/1"
BANKS = (TRACE_BANK, SCORE_BANK, R1_BANK)
# The code that selects and trains, relative to core/: the selection package (the arm table, its
# rules, the assignment, the SFT datasets), the policy keys, the text protocol, the seeds, training.
SEALED_CODE = ("selection/*.py", "policies.py", "protocol.py", "text_protocol.py", "seeds.py", "training*.py",
               "training/**/*.py")
_CORE = Path(__file__).resolve().parent
_COLUMNS = {TRACE_BANK: ["trace_id", "task_id", "eligible"], SCORE_BANK: ["trace_id", "task_id"],
            R1_BANK: ["trace_id", "task_id"]}


def code_digests() -> dict[str, str]:
    files = sorted({p for pattern in SEALED_CODE for p in _CORE.glob(pattern) if p.is_file()})
    return {p.relative_to(PROJECT_ROOT).as_posix(): sha256_file(p) for p in files}


def _parallel(fn, items: list) -> list:
    """hashlib and the Parquet reader release the GIL, so threads use every core."""
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return list(pool.map(fn, items))


def _index(store: Store, bank: str) -> tuple[dict, str]:
    data, digest = store.read(index_file(bank))
    return json.loads(data)["tasks"], digest


def validate_bank(store: Store, config: Config) -> tuple[list[str], dict]:
    """(problems, facts). Facts: index digests, trace counts and the eligible-set digest."""
    problems, frames, facts = [], {}, {"banks": {}, "keys": {}}
    tasks = train_task_ids(config)
    for bank in BANKS:
        index, digest = _index(store, bank)
        facts["banks"][bank] = {"index_sha256": digest, "shards": len(index)}
        found, facts["keys"][bank] = sealed_keys(store, config, bank, index)
        problems += found
        missing, extra = sorted(set(tasks) - set(index)), sorted(set(index) - set(tasks))
        problems += [f"{index_file(bank)}: train task {t} has no shard" for t in missing]
        problems += [f"{index_file(bank)}: {t} is not a train task of this profile" for t in extra]
        present = sorted(set(index) & set(tasks))
        hashed = _parallel(lambda t, b=bank: _hash_problem(store, b, t, index[t]["sha256"]), present)
        problems += [p for p in hashed if p]
        frame, strays = _scoped(store, bank, [t for t, p in zip(present, hashed) if not p])
        frames[bank] = frame
        problems += strays
    problems += _join_problems(frames)
    eligible = frames[TRACE_BANK].filter("eligible")["trace_id"].sort().to_list()
    facts.update(traces=frames[TRACE_BANK].height, eligible=len(eligible),
                 eligible_sha256=sha256_bytes("\n".join(eligible).encode()))
    return problems, facts


def _hash_problem(store: Store, bank: str, task_id: str, indexed: str) -> str | None:
    name = shard_file(bank, task_id)
    try:
        digest = store.verify(name)
    except (HashMismatchError, MissingArtifactError) as exc:
        return str(exc)
    return None if digest == indexed else (
        f"{store.path(name)}: SHA-256 {digest} differs from {index_file(bank)} ({indexed})")


def _scoped(store: Store, bank: str, task_ids: list[str]) -> tuple[pl.DataFrame, list[str]]:
    """The join columns of every verified shard in one scan, and rows that sit in another task's shard."""
    if not task_ids:
        return pl.DataFrame(schema={c: pl.Boolean if c == "eligible" else pl.String for c in _COLUMNS[bank]}), []
    owner = {str(store.path(shard_file(bank, t))): t for t in task_ids}
    frame = pl.scan_parquet(list(owner), include_file_paths="shard").select(*_COLUMNS[bank], "shard").collect()
    strays = (frame.filter(pl.col("task_id") != pl.col("shard").replace_strict(owner))
              .group_by("shard").len().sort("shard"))
    return frame.drop("shard"), [f"{shard}: {n} rows belong to another task than {owner[shard]}"
                                 for shard, n in strays.iter_rows()]


def _join_problems(frames: dict[str, pl.DataFrame]) -> list[str]:
    problems = []
    for bank, frame in frames.items():
        repeated = exactly_once((), frame["trace_id"]).repeated
        problems += [f"{bank}: trace id {t} appears more than once" for t, _ in repeated[:20]]
    chain = [(f"{TRACE_BANK} (eligible)", frames[TRACE_BANK].filter("eligible")["trace_id"]),
             (SCORE_BANK, frames[SCORE_BANK]["trace_id"]), (R1_BANK, frames[R1_BANK]["trace_id"])]
    for (a, ids_a), (b, ids_b) in zip(chain, chain[1:]):
        tally = exactly_once(sorted(set(ids_a)), set(ids_b))
        problems += [f"{b}: trace {t} is missing (present in {a})" for t in tally.missing[:20]]
        problems += [f"{b}: trace {t} has no counterpart in {a}" for t in tally.extra[:20]]
    return problems


def seal_document(store: Store, config: Config, facts: dict) -> dict:
    base = store.get_json(BASE_MODEL_REPORT)
    log = amendments.classified(store)
    anchor = read_anchor(store)  # the design anchor, where the store has one (`apsft freeze`)
    return {"format": FORMAT, "profile": config.sealed_profile, "config_digest": config.sealed_digest,
            "base_model_fingerprint": base["fingerprint"], "code": code_digests(), **facts,
            "amendments": {"log_sha256": store.verify(AMENDMENT_LOG) if log else None, "records": log},
            **({"anchor_sha256": anchor["sha256"]} if anchor else {}), **task_source(config)}


def task_source(config: Config) -> dict:
    """The task file by name, where the tasks come from one (its digest is also in the config digest)."""
    tasks = config.registered.tasks
    return {"task_source": {"path": tasks.source, "sha256": tasks.source_sha256}} if tasks.source else {}


def seal(store: Store, config: Config) -> tuple[dict, str]:
    """Validate, then write the seal; raises SealError listing every problem (nothing written)."""
    problems, facts = validate_bank(store, config)
    if problems:
        raise SealError(f"the bank does not validate; nothing was sealed ({len(problems)} problems):\n  "
                        + "\n  ".join(problems[:30]))
    doc = seal_document(store, config, facts)
    return doc, store.put_json(EVIDENCE_SEAL, doc)


def verify_seal(store: Store, config: Config) -> dict:
    """The sealed document, if everything it binds is unchanged; else SealError naming each change."""
    if not store.exists(EVIDENCE_SEAL):
        raise SealError(f"{store.path(EVIDENCE_SEAL)}: no evidence seal; materialize `evidence_seal` before selection")
    try:
        doc = json.loads(store.get_bytes(EVIDENCE_SEAL))
    except HashMismatchError as exc:
        raise SealError(f"the seal itself changed after sealing: {exc}") from None
    changes = _current_changes(store, config, doc)
    for bank in BANKS:
        changes += _bank_changes(store, bank, doc["banks"][bank]["index_sha256"])
    if changes:
        raise SealError("the evidence changed since it was sealed; selection refuses to run:\n  "
                        + "\n  ".join(changes[:30]) + "\nRestore what changed, or reseal (`evidence_seal`) "
                        "after recording the change as an amendment (`apsft amend`)")
    return doc


def _current_changes(store: Store, config: Config, doc: dict) -> list[str]:
    changes = []
    if config.sealed_digest != doc["config_digest"]:
        changes.append(f"config digest is {config.sealed_digest}, sealed {doc['config_digest']}")
    base = store.get_json(BASE_MODEL_REPORT)["fingerprint"]
    if base != doc["base_model_fingerprint"]:
        changes.append(f"base model fingerprint is {base}, sealed {doc['base_model_fingerprint']}")
    code = code_digests()
    changes += [f"code {f}: SHA-256 {code.get(f)}, sealed {doc['code'].get(f)}"
                for f in sorted(set(code) | set(doc["code"])) if code.get(f) != doc["code"].get(f)]
    anchor = read_anchor(store)
    if (anchor and anchor["sha256"]) != doc.get("anchor_sha256"):
        changes.append(f"design anchor {anchor and anchor['sha256']}, sealed {doc.get('anchor_sha256')}")
    log = store.verify(AMENDMENT_LOG) if store.exists(AMENDMENT_LOG) else None
    if log != doc["amendments"]["log_sha256"]:
        changes.append(f"{AMENDMENT_LOG}: digest {log}, sealed {doc['amendments']['log_sha256']} "
                       "(an amendment was recorded after sealing)")
    return changes


def _bank_changes(store: Store, bank: str, sealed: str) -> list[str]:
    path = store.path(index_file(bank))
    data = path.read_bytes() if path.is_file() else b""
    if sha256_bytes(data) != sealed:
        return [f"{path}: SHA-256 {sha256_bytes(data) if data else '(missing)'}, sealed {sealed}"]
    tasks = json.loads(data)["tasks"]
    files = [(store.path(shard_file(bank, t)), tasks[t]["sha256"]) for t in sorted(tasks)]
    files += [(store.path(key_file(bank, t)), tasks[t]["key_sha256"]) for t in sorted(tasks)
              if "key_sha256" in tasks[t]]
    actual = _parallel(lambda p: sha256_file(p[0]) if p[0].is_file() else None, files)
    return [f"{p}: SHA-256 {a}, sealed {sealed}" if a else f"{p}: missing (sealed {sealed})"
            for (p, sealed), a in zip(files, actual) if a != sealed]
