"""The six SFT arm files and the manifest on the smoke profile, checked against the banks."""

import gzip
import io
import json
import os
import subprocess
import sys

import polars as pl
import pytest

from apsft_dagster.core.base_model import load_tokenizer
from apsft_dagster.core.config import load_config
from apsft_dagster.core.layout import SFT_MANIFEST, TRACE_BANK, arm_file, arm_rows, shard_file
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.protocol import format_record
from apsft_dagster.core.selection.arms import ARMS


@pytest.fixture(scope="module")
def arms(smoke_run):
    _, store = smoke_run
    rows = {}
    for arm in ARMS:
        data = store.get_bytes(arm_file(arm))
        assert data[4:8] == b"\x00\x00\x00\x00", f"{arm}: gzip mtime is not 0"
        rows[arm] = [json.loads(line) for line in gzip.decompress(data).splitlines()]
    return rows


def test_manifest_checks_pass_and_every_arm_is_balanced(smoke_run, arms):
    results, store = smoke_run
    evaluations = {e.check_name: e.passed for e in results["sft_manifest_and_audits"].get_asset_check_evaluations()}
    assert evaluations == {"per_cell_balance": True, "rows_per_arm": True, "byte_identical_rerun": True}
    config = load_config("smoke")
    tasks = sorted(store.get_json(f"{TRACE_BANK}/index.json")["tasks"])
    for arm, rows in arms.items():
        assert len(rows) == 2 * config.tasks.train.total, arm
        if arm != "success_rft":
            assert sorted(r["task_id"] for r in rows) == sorted(tasks * 2), arm


def test_records_hold_target_prompt_and_answer_with_the_source_thought(smoke_run, arms):
    _, store = smoke_run
    catalog = {r["task_id"]: r for r in store.get_parquet("task_catalog.parquet").to_dicts()}
    traces = {r["trace_id"]: r for t in catalog if t.startswith(("caravan", "foundry", "runeward"))
              and store.exists(shard_file(TRACE_BANK, t))
              for r in store.get_parquet(shard_file(TRACE_BANK, t)).to_dicts()}
    tokenizer = load_tokenizer(load_config("smoke"), store)
    for arm, rows in arms.items():
        for row in rows:
            source, target = traces[row["source_trace_id"]], catalog[row["task_id"]]
            assert row["thought"] == source["thought"] and source["eligible"]
            assert (row["prompt"], row["answer"]) == (target["prompt"], target["answer"])
            assert row["source_task_id"] == source["task_id"]
            assert (source["task_id"] != row["task_id"]) == (arm == "potential_shuffle"), (arm, row["task_id"])
        for row in rows[:3]:
            ids = tokenizer(format_record(row["prompt"], row["thought"], row["answer"]),
                            add_special_tokens=False)["input_ids"]
            assert row["n_record_tokens"] == len(ids)


def test_manifest_counts_dose_and_envelope(smoke_run, arms):
    _, store = smoke_run
    config = load_config("smoke")
    manifest = store.get_json(SFT_MANIFEST)
    assert manifest["evidence_seal_sha256"] == store.verify("evidence_seal.json")
    envelope = config.training.throughput_tokens_per_s
    for entry in manifest["arms"]:
        rows = arms[entry["arm"]]
        forward = sum(min(r["n_record_tokens"], config.training.max_length) for r in rows) * config.training.epochs
        assert entry["sha256"] == store.verify(arm_file(entry["arm"]))
        assert entry["rows"] == len(rows) and entry["unique_sources"] == len({r["source_trace_id"] for r in rows})
        assert entry["thought_tokens"] == sum(r["n_thought_tokens"] for r in rows)
        assert entry["forward_tokens"] == forward
        assert entry["device_hours"] == {"low": round(forward / envelope.high / 3600, 4),
                                         "high": round(forward / envelope.low / 3600, 4)}
        modes = {}
        for r in rows:
            modes[r["mode"]] = modes.get(r["mode"], 0) + 1
        assert entry["mode_counts"] == modes
    provenance = pl.read_parquet(io.BytesIO(store.get_bytes(arm_rows("answer_potential"))))
    assert "thought" not in provenance.columns and provenance.height == len(arms["answer_potential"])


def test_selection_rerun_in_a_fresh_process_is_byte_identical(smoke_run):
    """Another interpreter with another hash seed rebuilds all six files with the stored SHA-256s."""
    _, store = smoke_run
    script = ("import sys; from apsft_dagster.core.config import load_config; "
              "from apsft_dagster.core.store import Store; from apsft_dagster.core.base_model import load_tokenizer; "
              "from apsft_dagster.core.selection.sft_arms import build_arms, digest_of; "
              "c = load_config('smoke'); s = Store(sys.argv[1]); "
              "arms = build_arms(s, c, s.get_parquet('task_catalog.parquet'), load_tokenizer(c, s)); "
              "print(' '.join(f'{a}={digest_of(f)}' for a, f in arms.items()))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    env.pop("APSFT_CONFIG", None)
    proc = subprocess.run([sys.executable, "-c", script, str(store.root)], capture_output=True, text=True,
                          env=env, cwd=PROJECT_ROOT, check=True)
    rerun = dict(pair.split("=") for pair in proc.stdout.split())
    assert rerun == {arm: store.verify(arm_file(arm)) for arm in ARMS}
