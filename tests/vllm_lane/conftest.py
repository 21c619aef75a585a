"""The vLLM lane: vLLM's CPU build (`.venv-vllm`, `bash scripts/setup.sh vllm`) on the smoke_vllm
models the main venv built and handed over (`scripts/vllm_lane_model.py`); nothing here builds or
trains a smoke model under vLLM's transformers (test_vllm_gpu_rehearsal.py builds and trains the
GPU rehearsal's tiny Qwen3.5 snapshot under them, as the GPU machine will). Every test is marked
`vllm`. The lane fails when a test
is skipped or none ran, and its summary prints how many ran, each engine's start and release, and
the parity gate's receipt (also kept under the handover folder's receipts/).

Run: .venv-vllm/bin/python -m pytest tests/vllm_lane   (scripts/test.sh does, after the main suite)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from apsft_dagster.core.config import Config, load_config
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.store import dir_digests, fingerprint

LANE_DIR = Path(os.environ.get("APSFT_VLLM_LANE_DIR") or PROJECT_ROOT / ".apsft" / "vllm_lane")
PROFILE = "smoke_vllm"
_outcomes = {"passed": 0, "failed": 0, "skipped": 0}


@dataclass
class Lane:
    root: Path
    handover: dict
    config: Config
    engines: list[dict] = field(default_factory=list)

    @property
    def base(self) -> str:
        return str(self.root / "base")

    @property
    def merged(self) -> str:
        return str(self.root / "merged")

    def receipt(self, name: str, doc: dict) -> Path:
        path = self.root / "receipts" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(doc, sort_keys=True, indent=1) + "\n")
        return path

    def serve(self, model_dir: str, what: str):
        """A module's one LLM (a `VllmEngine` on `model_dir`), its start and release recorded."""
        from apsft_dagster.core.engines.vllm_engine import VllmEngine
        from apsft_dagster.core.protocol import STOP_TOKENS

        engine = VllmEngine(model_dir, STOP_TOKENS, self.config.compute, self.config.vllm)
        yield engine
        self.record_engine(what, engine.start_s, engine.close())

    def record_engine(self, what: str, start_s: float, release_s: float) -> None:
        self.engines.append({"engine": what, "start_s": round(start_s, 2), "release_s": round(release_s, 2)})
        self.receipt("engine_timings.json", {"engines": self.engines})


_lane: Lane | None = None


@pytest.fixture(scope="session")
def lane() -> Lane:
    """The handed-over models, each directory checked against the fingerprint the handover recorded."""
    global _lane
    manifest = LANE_DIR / "handover.json"
    if not manifest.is_file():
        pytest.fail(f"{manifest}: no handover; run `.venv/bin/python scripts/vllm_lane_model.py` first "
                    "(the main venv builds the lane's models)")
    handover = json.loads(manifest.read_text())
    for name, want in handover["fingerprints"].items():
        got = fingerprint(dir_digests(LANE_DIR / name))
        assert got == want, (f"{LANE_DIR / name}: fingerprint {got[:12]} is not the handover's {want[:12]}; "
                             "rerun the handover")
    _lane = Lane(LANE_DIR, handover, load_config(PROFILE))
    return _lane


def pytest_configure(config):
    for message in ("`torch.jit.script_method` is deprecated", "`torch.distributed.reduce_op` is deprecated"):
        config.addinivalue_line("filterwarnings", f"ignore:{message}")  # vLLM's own imports, nothing of ours


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.vllm)


def pytest_runtest_logreport(report):
    if report.skipped:
        _outcomes["skipped"] += 1
    elif report.failed:
        _outcomes["failed"] += 1
    elif report.when == "call":
        _outcomes["passed"] += 1


def pytest_sessionfinish(session, exitstatus):
    if _outcomes["skipped"] or not _outcomes["passed"] + _outcomes["failed"]:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # the lane runs everything or it fails


def pytest_terminal_summary(terminalreporter):
    write = terminalreporter.write_line
    ran = _outcomes["passed"] + _outcomes["failed"]
    write(f"vllm lane: {ran} vllm tests ran ({_outcomes['passed']} passed, {_outcomes['failed']} failed), "
          f"{_outcomes['skipped']} skipped"
          + (" -- a skipped vllm test fails the lane" if _outcomes["skipped"] else ""))
    if _lane is None:
        return
    for e in _lane.engines:
        write(f"vllm lane: {e['engine']}: started in {e['start_s']:.1f} s, released in {e['release_s']:.1f} s")
    parity = _lane.root / "receipts" / "parity_gate.json"
    if parity.is_file():
        doc = json.loads(parity.read_text())
        write(f"vllm lane: parity gate ({doc['traces']} calibration traces, threshold {doc['threshold']}): "
              f"{'passed' if doc['passed'] else 'FAILED'}, worst {doc['worst_metric']} {doc['worst_value']:.3g}")
        for metric, worst in doc["metrics"].items():
            write(f"vllm lane:   {metric:<18} max {worst:.3e}  mean {doc['means'][metric]:.3e}")
