"""The key of a bank shard: what determines its bytes (docs/PROTOCOL.md §8, "Evidence keyed by what made it").

A shard's key is a small JSON document, written (receipted) beside the shard before the shard itself,
at `<bank>/keys/<task>.json`:

- `settings`, the same for every shard a run makes: the config fields that feed the bank (`FEEDS`:
  the sealed sections' fields, flattened to dotted names, by the rule that builds the seal's digest;
  cumulative, since a score is made from a trace and a rollout from both), the base model's
  fingerprint, the SHA-256 of the code that makes the bank (`CODE`), the experiment seed, and for
  the score bank the instrument that scored it (which a failed parity gate may have changed);
- `task`: the task's id, the SHA-256 of its prompt and answer, and the SHA-256 of the upstream shards
  it was made from (a remade trace shard makes its scores stale).

An inherited shard keeps the key it was exported with (`made_by`) under settings that name the
inherited index: a rerun never re-reads the parent's settings as this study's. An imported shard
(`apsft import-traces`, core/trace_import.py) names its file (`imported`: SHA-256, the fields it lacks)
instead of generation settings, beside what judged its traces here (`IMPORT_FEEDS`, the model, `IMPORT_CODE`).
Nothing here reads the store or Dagster: core/bank_key_check.py compares keys in a store.
"""

from __future__ import annotations

from pathlib import Path

from apsft_dagster.core.layout import R1_BANK, SCORE_BANK, TRACE_BANK
from apsft_dagster.core.store import json_bytes, sha256_bytes, sha256_file

FORMAT = "apsft-bank-key/1"
BANKS = (TRACE_BANK, SCORE_BANK, R1_BANK)
# Each bank's upstream bank (its shards are made from that bank's shard of the same task).
UPSTREAM = {TRACE_BANK: (), SCORE_BANK: (TRACE_BANK,), R1_BANK: (TRACE_BANK, SCORE_BANK)}
# The config that feeds each bank: sections (or dotted fields) of the sealed config. `tasks` and the
# task seeds do not appear: a task's own content (its prompt and answer digest) is in its key, so a
# change to the split sizes keeps every shard of a task that is still there.
_TRACE = ("seeds.experiment", "model", "protocol", "compute", "embedded", "harvest")  # protocol: a snapshot's markers
# A task file's digest feeds R1 (its rows' checkers decide `success`); absent (the builders), it adds no field.
FEEDS = {TRACE_BANK: _TRACE, SCORE_BANK: (*_TRACE, "scoring"),
         R1_BANK: (*_TRACE, "scoring", "rollouts", "tasks.source_sha256")}
# The code that makes each bank's bytes, relative to core/ (the text protocol and seeds are also sealed code).
CODE = {TRACE_BANK: ("harvest.py", "loops.py", "protocol.py", "text_protocol.py", "seeds.py"),
        SCORE_BANK: ("scoring.py", "instruments.py", "score_bank.py", "protocol.py", "text_protocol.py"),
        R1_BANK: ("rollouts.py", "protocol.py", "text_protocol.py", "seeds.py")}
# An imported trace shard: what decides its bytes beside the file (the tokenizer's model, the markers, the
# harvest's rules that judge and batch a trace) and the code that applies them.
IMPORTED = "imported"
IMPORT_FEEDS = ("model", "protocol", "harvest.loop", "harvest.record_limit", "harvest.min_eligible",
                "harvest.samples_per_task", "harvest.topup_size", "harvest.topup_batches")
IMPORT_CODE = (*CODE[TRACE_BANK], "trace_import.py")
# Fields in a key that decide no byte of the shard it keys (a gate's threshold, where a bank is
# imported from, which instrument was asked for when the one that scored is in the key): a recorded
# amendment may cover a change to one of them and keep the shards. Any other field decides bytes:
# only a recompute or a new store answers its change.
AMENDABLE = ("harvest.min_eligible", "harvest.inherited_index", "scoring.parity_threshold",
             "scoring.calibration_traces", "scoring.instrument", "scoring.on_failed_gate", "vllm.in_process")
_CORE = Path(__file__).resolve().parent


def code_digests(bank: str, names: tuple[str, ...] | None = None) -> dict[str, str]:
    return {f"core/{name}": sha256_file(_CORE / name) for name in (names or CODE[bank])}


def flat(obj: object, prefix: str = "") -> dict[str, object]:
    """A JSON tree as {dotted name: leaf value}; an empty mapping or list is a leaf."""
    if isinstance(obj, dict) and obj:
        out = {}
        for key in sorted(obj):
            out.update(flat(obj[key], f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: obj}


def fed_fields(config, bank: str) -> dict[str, object]:
    """The config fields that feed `bank`, flattened; `vllm` feeds the banks a vLLM engine makes."""
    return fields_of(config, FEEDS[bank] + (("vllm",) if config.harvest.backend == "vllm" else ()))


def fields_of(config, feeds: tuple[str, ...]) -> dict[str, object]:
    """The config's sections or dotted fields `feeds`, flattened (a name the config lacks: none)."""
    body = config.model_dump(mode="json")
    fields = {}
    for name in feeds:
        node = body
        for part in name.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        fields.update(flat(node, name) if node is not None else {})
    return fields


def settings(config, bank: str, model_fingerprint: str, instrument: str | None = None) -> dict:
    """What every shard of `bank` a run makes shares: fields, model, code, seed (and the scoring instrument)."""
    out = {"fields": fed_fields(config, bank), "model_fingerprint": model_fingerprint, "code": code_digests(bank),
           "seed": config.seeds.experiment}
    if bank != TRACE_BANK:
        out["instrument"] = instrument or config.scoring.instrument
    return out


def inherited_settings(index_sha256: str) -> dict:
    return {"inherited_index_sha256": index_sha256}


def imported_settings(config, model_fingerprint: str, source: dict) -> dict:
    """An imported trace shard's settings: its file (`source`: SHA-256, what it lacks) and what judged it here."""
    return {IMPORTED: source, "fields": fields_of(config, IMPORT_FEEDS), "model_fingerprint": model_fingerprint,
            "code": code_digests(TRACE_BANK, IMPORT_CODE)}


def source(settings: dict) -> str:
    """Where a shard's traces come from: "inherited", "imported" or "made here"."""
    return "inherited" if "inherited_index_sha256" in settings else "imported" if IMPORTED in settings \
        else "made here"


def task_part(task: dict, inputs: dict[str, str]) -> dict:
    """The per-task part: id, content digest, and the upstream shards' SHA-256 (bank -> digest)."""
    content = sha256_bytes(json_bytes({"prompt": task["prompt"], "answer": task["answer"]}))
    return {"task_id": task["task_id"], "task_sha256": content, "inputs": dict(sorted(inputs.items()))}


def shard_key(bank: str, made_with: dict, task: dict, made_by: dict | None = None) -> dict:
    doc = {"format": FORMAT, "bank": bank, "settings": made_with, "task": task}
    if made_by is not None:
        doc["made_by"] = made_by
    return doc


def changes(old: dict, new: dict) -> list[tuple[str, object, object]]:
    """(name, old value, new value) for each setting that differs: a config field by its dotted name,
    `model fingerprint`, `code <file>`, `seeds.experiment`, `instrument`, `inherited index`."""
    if source(old) != source(new):
        return [("inherited" if "inherited" in (source(old), source(new)) else "imported", source(old), source(new))]
    if "inherited_index_sha256" in old:
        a, b = old["inherited_index_sha256"], new["inherited_index_sha256"]
        return [] if a == b else [("harvest.inherited_index_sha256", a, b)]
    found = []
    for name in sorted(set(old["fields"]) | set(new["fields"])):
        a, b = old["fields"].get(name, "(absent)"), new["fields"].get(name, "(absent)")
        if a != b:
            found.append((name, hashable(a), hashable(b)))
    for name, label in (("model_fingerprint", "model fingerprint"), ("seed", "seeds.experiment"),
                        ("instrument", "instrument")):
        if old.get(name) != new.get(name):
            found.append((label, old.get(name), new.get(name)))
    for name in sorted(set(old["code"]) | set(new["code"])):
        if old["code"].get(name) != new["code"].get(name):
            found.append((f"code {name}", old["code"].get(name), new["code"].get(name)))
    return found


def hashable(value: object) -> object:
    """A JSON value as a set member: lists become tuples."""
    return tuple(hashable(v) for v in value) if isinstance(value, list) else value


def shown(value: object) -> str:
    return value[:12] if isinstance(value, str) and len(value) == 64 else repr(value) if isinstance(value, str) \
        else str(value)
