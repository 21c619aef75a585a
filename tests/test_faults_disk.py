"""A store on a nearly full filesystem: a small tmpfs this test mounts (as root; elsewhere the test
is skipped, saying why). The loss-mask stage (census, build, verify, packs: folders and files)
runs out of space midway: it fails naming the artifact, every receipt in the store still verifies
(no partial artifact counted, no temp file left), and once space is freed the stage resumes to
the bytes an ordinary disk gives."""

import os
import shutil
import subprocess

import dagster as dg
import pytest

from apsft_dagster.core.errors import StoreWriteError
from apsft_dagster.core.layout import BASE_MODEL_DIR, BASE_MODEL_REPORT
from apsft_dagster.core.loss_mask.dataset import dataset_lines
from apsft_dagster.core.loss_mask.datasets import register
from apsft_dagster.core.store import RECEIPT_SUFFIX, Store
from apsft_dagster.loss_mask.partitions import LM_DATASET
from apsft_dagster.loss_mask.stages import LOSS_MASK_STAGES
from apsft_dagster.runner import run_partition
from conftest import smoke_definitions

ROWS, SEED, PAGE = 300, 11, 4096


@pytest.fixture
def tmpfs(tmp_path):
    """(mount point, resize(bytes)): a tmpfs mounted for this test and unmounted after it."""
    point = tmp_path / "disk"
    point.mkdir()
    if os.geteuid() != 0:
        pytest.skip(f"mounting a tmpfs needs root; this test runs as uid {os.geteuid()} (the CI and the project's "
                    "machines run it as root)")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(point)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"mount -t tmpfs was refused here: {mounted.stderr.strip()}")

    def resize(size: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(point)], check=True, capture_output=True)

    try:
        yield point, resize
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def _store_with_base_model(source: Store, root) -> Store:
    store = Store(root)
    for name in (BASE_MODEL_DIR, BASE_MODEL_REPORT):
        store.path(name).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.path(name).is_dir() else shutil.copy)(source.path(name), store.path(name))
        shutil.copy(source.receipt_path(name), store.receipt_path(name))
    return store


def _used(root) -> int:
    """Bytes the files take on a tmpfs: each file rounded up to whole pages."""
    return sum(-(-p.stat().st_size // PAGE) * PAGE for p in root.rglob("*") if p.is_file())


def _run(store: Store, instance):
    """The loss-mask stage itself (its SQL audits, a later stage, left out)."""
    return run_partition(smoke_definitions(store.root), instance, LOSS_MASK_STAGES[:1], LM_DATASET, "v1",
                         alert=False)


def _failures(instance, outcome) -> str:
    return "\n".join(e.dagster_event.step_failure_data.error.to_string() for run_id in outcome.run_ids
                     for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE))


def _files(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix != ".duckdb"}


def test_a_full_disk_fails_by_artifact_counts_only_whole_artifacts_and_resumes(smoke_run, tmpfs, tmp_path):
    point, resize = tmpfs
    _, source = smoke_run
    data = tmp_path / "v1.jsonl"
    data.write_bytes(b"".join(dataset_lines(ROWS, SEED)))
    reference = _store_with_base_model(source, tmp_path / "reference")
    register(reference, "v1", data)
    base = _used(reference.root)
    assert all(o.ok for o in _run(reference, dg.DagsterInstance.ephemeral()))
    needed = _used(reference.root)

    store = _store_with_base_model(source, point / "store")
    register(store, "v1", data)
    room = base + (needed - base) // 3  # room for the census and part of the rest
    resize(room)
    instance = dg.DagsterInstance.ephemeral()
    failed = _run(store, instance)
    assert not failed[0].ok, f"the stage fitted: base {base}, needed {needed}, room {room} bytes"
    said = _failures(instance, failed[0])
    assert "No space left on device" in said and f"{point}/store/" in said and "writing it failed" in said, said
    for receipt in store.root.rglob(f"*{RECEIPT_SUFFIX}"):  # every artifact that counts is whole
        store.verify(receipt.relative_to(store.root).as_posix().removesuffix(RECEIPT_SUFFIX))
    assert not [p for p in store.root.rglob("*") if ".tmp-" in p.name]
    kept = {p.name for p in store.root.rglob(f"*{RECEIPT_SUFFIX}")}
    assert "census.json" + RECEIPT_SUFFIX in kept and "comparison.json" + RECEIPT_SUFFIX not in kept

    resize(needed * 2)  # space freed: the same stage, rerun, resumes to the reference's bytes
    assert all(o.ok for o in _run(store, dg.DagsterInstance.ephemeral()))
    assert _files(store.root) == _files(reference.root)


def _fill_up(point, leave: int):
    """A ballast file taking all the space but `leave` bytes."""
    ballast = point / "ballast"
    with open(ballast, "wb", buffering=0) as fh:
        try:
            while fh.write(b"\0" * PAGE):
                pass
        except OSError:
            pass
    os.truncate(ballast, max(0, ballast.stat().st_size - leave))
    return ballast


def test_a_write_that_does_not_fit_leaves_no_receipt_and_no_temp_file(tmpfs):
    """The store's own rule on a disk with room for a receipt but not for the artifact: the data
    write fails naming the artifact, nothing of it (temp file, half-built folder, receipt) is left,
    what was there still verifies, and the same writes succeed once space is freed."""
    point, resize = tmpfs
    resize(128 * PAGE)
    store = Store(point / "store")
    store.put_bytes("kept.json", b'{"a": 1}')
    big = bytes(range(256)) * (64 * PAGE // 256)
    ballast = _fill_up(point, leave=4 * PAGE)
    with pytest.raises(StoreWriteError, match=f"{point}/store/big.bin: writing it failed .*No space left on device"):
        store.put_bytes("big.bin", big)
    with pytest.raises(StoreWriteError, match=f"{point}/store/model: writing it failed .*No space left on device"):
        store.put_dir("model", lambda folder: (folder / "weights.bin").write_bytes(big))
    left = sorted(p.relative_to(store.root).as_posix() for p in store.root.rglob("*"))
    assert left == ["kept.json", "kept.json" + RECEIPT_SUFFIX], left
    assert store.verify("kept.json")
    ballast.unlink()
    resize(512 * PAGE)
    store.put_bytes("big.bin", big)
    store.put_dir("model", lambda folder: (folder / "weights.bin").write_bytes(big))
    assert store.get_bytes("big.bin") == big and store.verify("model")
