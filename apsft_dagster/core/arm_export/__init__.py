"""`apsft export-arms`: the six SFT arms as other trainers read them (docs/export-arms.md).

`messages`: per arm `<arm>.jsonl` (chat `messages` rows with `input_ids`, per-token `loss_weights`
and `completion_mask`), LLaMA-Factory's `dataset_info.json`, and `export.json`.
`datasets`: one Hugging Face `datasets` folder, one config per arm: `<arm>/train-00000-of-00001.parquet`
(the store's fixed Parquet settings, so equal rows give equal bytes), `<arm>/dataset_info.json`,
README.md (the dataset card) and `export.json`.

Everything is checked before the first write: the format, an empty or absent --out, and that the
store's arms are sealed (the evidence seal's and the SFT manifest's receipts verify, the manifest names
that seal and this config, every arm file has the manifest's SHA-256). The folder is built beside
--out and renamed into place, so a refused or failed export leaves nothing.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import polars as pl

from apsft_dagster.core.arm_export.card import dataset_card, dataset_info, llama_factory_info, shard_name
from apsft_dagster.core.arm_export.records import export_row
from apsft_dagster.core.config import Config
from apsft_dagster.core.errors import ExportError
from apsft_dagster.core.layout import BASE_MODEL_REPORT, EVIDENCE_SEAL, SFT_MANIFEST, arm_file
from apsft_dagster.core.store import Store, json_bytes, parquet_bytes, sha256_bytes, write_atomic
from apsft_dagster.core.text_protocol import TextProtocol, for_config

FORMATS = ("messages", "datasets")
FORMAT = "apsft-arm-export/1"
SCHEMA = {"row": pl.Int64, "task_id": pl.String, "source_trace_id": pl.String, "family": pl.String,
          "level": pl.Int64, "mode": pl.String,
          "messages": pl.List(pl.Struct({"role": pl.String, "content": pl.String})),
          "input_ids": pl.List(pl.Int32), "loss_weights": pl.List(pl.Float32), "completion_mask": pl.List(pl.Int8)}


def refusal(store: Store, fmt: str, out: Path) -> str | None:
    """Why nothing may be exported (None: go ahead); nothing is read beyond a few names."""
    if fmt not in FORMATS:
        return f"--format {fmt!r}: unknown; choose one of {', '.join(FORMATS)}"
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        return (f"--out {out}: exists and is not an empty folder; choose a new folder (it is created) or empty "
                "this one")
    if not store.exists(SFT_MANIFEST):
        return (f"store {store.root}: no sealed arms yet ({SFT_MANIFEST} is absent); run the experiment through "
                "selection first (`apsft run`, which materializes sft_arms and sft_manifest)")
    return None


def export_arms(store: Store, config: Config, fmt: str, out: str | Path, tokenizer=None) -> dict:
    """Write the export into `out` (created); return its `export.json` document."""
    out = Path(out)
    why = refusal(store, fmt, out)
    if why:
        raise ExportError(f"export-arms refused, nothing written: {why}")
    manifest, manifest_sha, seal_sha = sealed_manifest(store, config)
    if tokenizer is None:
        from apsft_dagster.core.base_model import load_tokenizer

        tokenizer = load_tokenizer(config, store)
    protocol = for_config(config)  # the run's text protocol: the record's markers and end of turn
    entries = {e["arm"]: e for e in manifest["arms"]}
    rows = {arm: export_rows(store, tokenizer, protocol, config, e) for arm, e in entries.items()}
    provenance = {"format": FORMAT, "export": fmt, "profile": manifest["profile"],
                  "config_digest": manifest["config_digest"], "evidence_seal_sha256": seal_sha,
                  "sft_manifest_sha256": manifest_sha,
                  "base_model_fingerprint": store.get_json(BASE_MODEL_REPORT)["fingerprint"],
                  "loss_weights": config.training.loss_weights.model_dump(),
                  "max_length": config.training.max_length}
    files = messages_files(rows) if fmt == "messages" else datasets_files(rows, provenance, entries)
    document = {**provenance, "arms": {arm: {"rows": len(r), "arm_file_sha256": entries[arm]["sha256"]}
                                       for arm, r in rows.items()},
                "files": {name: sha256_bytes(data) for name, data in sorted(files.items())}}
    files["export.json"] = json_bytes(document)
    write_folder(out, files)
    return document


def sealed_manifest(store: Store, config: Config) -> tuple[dict, str, str]:
    """(the SFT manifest, its SHA-256, the evidence seal's SHA-256) once both receipts verify and the
    manifest names this seal and this config (each arm file is checked against it as it is read)."""
    seal_sha = store.verify(EVIDENCE_SEAL)
    data, manifest_sha = store.read(SFT_MANIFEST)
    manifest = json.loads(data)
    fix = "rematerialize sft_arms and sft_manifest (apsft run --from sft_arms_job)"
    if manifest["evidence_seal_sha256"] != seal_sha:
        raise ExportError(f"{store.path(SFT_MANIFEST)} names seal {manifest['evidence_seal_sha256']}, the store's "
                          f"seal is {seal_sha}; {fix}")
    if manifest["config_digest"] != config.sealed_digest:
        raise ExportError(f"{store.path(SFT_MANIFEST)} was built under config {manifest['config_digest']}, profile "
                          f"{config.profile} is {config.sealed_digest}; name the profile it was built under, or {fix}")
    return manifest, manifest_sha, seal_sha


def export_rows(store: Store, tokenizer, protocol: TextProtocol, config: Config, entry: dict) -> list[dict]:
    """An arm's training records (their SHA-256 the manifest's), each as `records.export_row`."""
    data, digest = store.read(arm_file(entry["arm"]))
    if digest != entry["sha256"]:
        raise ExportError(f"{store.path(arm_file(entry['arm']))}: SHA-256 {digest}, the SFT manifest says "
                          f"{entry['sha256']}; rematerialize sft_arms and sft_manifest")
    records = [json.loads(line) for line in gzip.decompress(data).splitlines()]
    return [export_row(tokenizer, protocol, r, config.training.loss_weights, f"{arm_file(entry['arm'])} row {r['row']}")
            for r in records]


def jsonl_bytes(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r, sort_keys=True, ensure_ascii=False).encode() + b"\n" for r in rows)


def messages_files(rows: dict[str, list[dict]]) -> dict[str, bytes]:
    files = {f"{arm}.jsonl": jsonl_bytes(r) for arm, r in rows.items()}
    files["dataset_info.json"] = json_bytes(llama_factory_info(list(rows)))
    return files


def datasets_files(rows: dict[str, list[dict]], provenance: dict, entries: dict[str, dict]) -> dict[str, bytes]:
    frames = {arm: pl.DataFrame(r, schema=SCHEMA) for arm, r in rows.items()}
    files = {shard_name(arm): parquet_bytes(frame) for arm, frame in frames.items()}
    files |= {f"{arm}/dataset_info.json": json_bytes(dataset_info(arm, frame.schema, frame.height))
              for arm, frame in frames.items()}
    files["README.md"] = dataset_card(provenance, {a: f.schema for a, f in frames.items()}, entries).encode()
    return files


def write_folder(out: Path, files: dict[str, bytes]) -> None:
    """Every file into a sibling temp folder, then one rename into place (an empty `out` is replaced)."""
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for name, data in files.items():
            write_atomic(tmp / name, data)
        if out.exists():
            out.rmdir()  # empty: refusal() checked it
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
