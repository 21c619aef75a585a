"""Bank keys on README command 1's store (issue 58): an edited profile is refused before anything is
written, `--recompute` remakes what it must, and the seal fails on a key that is not the sealed one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import SealError
from apsft_dagster.core.layout import TRACE_BANK, key_file, shard_file
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.seal import verify_seal
from apsft_dagster.core.store import Store
from tests.conftest import variant_config

pytestmark = pytest.mark.after_the_run  # a copy of the run, processes of its own (tests/conftest.py)


def _copy(cli_run, tmp_path) -> Store:
    _, source, _ = cli_run
    shutil.copytree(source.root, tmp_path / "store")
    return Store(tmp_path / "store")


def _apsft(tmp_path, *args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APSFT_PROFILE", "APSFT_CONFIG", "DAGSTER"))}
    env.update(APSFT_STATE_DIR=str(tmp_path / "state"), APSFT_SECOND_CORE="off")  # the other core is the suite's
    return subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "run", *args], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def _files(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_an_edited_allowance_is_refused_then_recompute_remakes_the_shard(cli_run, tmp_path):
    """The allowance feeds the trace bank's keys but not the embedded model's cache key (harvest.sampling
    does: the capability check samples with it), so the remake reuses command 1's model rather than
    building one (about 230 s on a fresh cache); test_bank_keys.py refuses an edited temperature."""
    store = _copy(cli_run, tmp_path)
    edited = variant_config(tmp_path, lambda raw: raw["harvest"].update(allowance=128))
    before = _files(store.root)
    refused = _apsft(tmp_path, "--config", str(edited), "--store", str(store.root), "--from", "trace_bank_job",
                     "--to", "evidence_seal_job")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "harvest.allowance 160 → 128: trace_bank 18 shards (e.g. caravan-L1-000), score_bank 18 " \
           "shards (e.g. caravan-L1-000), r1_labels 18 shards (e.g. caravan-L1-000)" in refused.stderr
    assert _files(store.root) == before  # refused before anything was written

    task, other = "caravan-L1-000", "runeward-L3-001"
    remade = _apsft(tmp_path, "--config", str(edited), "--store", str(store.root), "--to", "trace_bank_job",
                    "--partitions", f"trace_bank_job={task}", "--recompute")
    assert remade.returncode == 0, remade.stdout + remade.stderr
    assert "trace_bank: remaking 18 shards made under other settings (harvest.allowance 160 → 128)" \
        in remade.stdout
    key = json.loads(store.get_bytes(key_file(TRACE_BANK, task)))
    assert key["settings"]["fields"]["harvest.allowance"] == 128
    assert store.path(shard_file(TRACE_BANK, task)).read_bytes() != before[shard_file(TRACE_BANK, task)]
    for name in (shard_file(TRACE_BANK, other), key_file(TRACE_BANK, other)):  # not asked for: as it was
        assert store.path(name).read_bytes() == before[name]


def test_the_seal_fails_on_a_shard_key_that_is_not_the_sealed_one(cli_run, tmp_path):
    store = _copy(cli_run, tmp_path)
    config = load_config("smoke")
    assert verify_seal(store, config)["keys"][TRACE_BANK]["shards"] == 18
    name = key_file(TRACE_BANK, "foundry_ledger-L2-001")
    forged = json.loads(store.get_bytes(name))
    forged["settings"]["fields"]["harvest.sampling.temperature"] = 0.5
    store.put_json(name, forged)  # a key and its receipt rewritten together: only the seal's index knows
    with pytest.raises(SealError, match=r"trace_bank/keys/foundry_ledger-L2-001\.json: SHA-256 \w+, sealed \w+"):
        verify_seal(store, config)
