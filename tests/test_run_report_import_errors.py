"""Each importer of the RL run report refuses a truncated file, a wrong type or a missing step with
a RunReportError naming the file, the line (JSON lines, CSV) and the field, and nothing is
registered; fuzzed like the other readers (tests/fuzzing.py, a small example budget)."""

from __future__ import annotations

import json
import shutil
import tempfile
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apsft_dagster.core.errors import ApsftError
from apsft_dagster.core.run_report import RunReportError
from apsft_dagster.core.run_report.importers import input_files
from apsft_dagster.core.run_report.registry import register
from apsft_dagster.core.store import Store
from fuzzing import fuzz_settings, judge, mutated_bytes, mutated_document
from rl_import_folders import tensorboard_folder, trl_folder, verl_folder, wandb_folder

BUILDERS = {"trl": trl_folder, "tensorboard": tensorboard_folder, "wandb": wandb_folder, "verl": verl_folder}


@cache
def template(kind: str) -> Path:
    return BUILDERS[kind](Path(tempfile.mkdtemp(prefix=f"rl-{kind}-")) / "run")


def edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def edit_line(path: Path, n: int, change) -> None:
    lines = path.read_text().splitlines()
    row = json.loads(lines[n - 1])
    change(row)
    lines[n - 1] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")


def cut(path: Path, keep: int = -7) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def tb_file(folder: Path) -> Path:
    return next(folder.rglob("events.out.tfevents.*"))


CASES = [  # (source, the change, the file it touches, the words the error must hold)
    ("trl", lambda f: cut(f / "trainer_state.json"), "trainer_state.json", r"not valid JSON \(.* line \d+"),
    ("trl", lambda f: edit_json(f / "trainer_state.json", lambda d: d["log_history"][1].update(reward="high")),
     "trainer_state.json", r"field 'log_history\.1\.reward': must be a number or null, got str"),
    ("trl", lambda f: edit_json(f / "trainer_state.json", lambda d: d["log_history"][2].pop("step")),
     "trainer_state.json", r"field 'log_history\.2\.step': missing"),
    ("trl", lambda f: edit_json(f / "checkpoint-20" / "trainer_state.json", lambda d: d.update(global_step=19)),
     "checkpoint-20/trainer_state.json", r"field 'global_step': says 19 but the folder is checkpoint-20"),
    ("trl", lambda f: edit_json(f / "checkpoint-10" / "adapter_config.json",
                                lambda d: d.update(base_model_name_or_path=7)),
     "checkpoint-10/adapter_config.json", r"field 'base_model_name_or_path': must be a string"),
    ("tensorboard", lambda f: cut(tb_file(f)), "events.out.tfevents",
     r"field '\(record\)': cut or damaged at byte"),
    ("tensorboard", lambda f: tb_file(f).write_text('{"step": 1}'), "events.out.tfevents",
     r"field '\(record\)': cut or damaged at byte 0 of 11"),
    ("wandb", lambda f: cut(f / "wandb_export.csv", -6), "wandb_export.csv",
     r"line 4: field '\(row\)': has 4 cells, the header 5"),
    ("wandb", lambda f: (f / "wandb_export.csv").write_text((f / "wandb_export.csv").read_text().replace(
        "0.25,1.0", "high,1.0")), "wandb_export.csv", r"line 2: field 'eval/accuracy': 'high' is not a number"),
    ("wandb", lambda f: (f / "wandb_export.csv").write_text((f / "wandb_export.csv").read_text().replace(
        "\n5,", "\n,")), "wandb_export.csv", r"line 3: field '_step': a step is a whole number"),
    ("verl", lambda f: cut(f / "metrics.jsonl", -20), "metrics.jsonl", r"line 2: not valid JSON"),
    ("verl", lambda f: edit_line(f / "metrics.jsonl", 1, lambda r: r["data"].update({"critic/score/mean": "x"})),
     "metrics.jsonl", r"line 1: field 'critic/score/mean': must be a number or null, got str"),
    ("verl", lambda f: edit_line(f / "metrics.jsonl", 2, lambda r: r.pop("step")), "metrics.jsonl",
     r"line 2: field 'step': missing"),
    ("verl", lambda f: edit_line(f / "rollouts" / "2.jsonl", 1, lambda r: r.update(score=[1])), "rollouts/2.jsonl",
     r"line 1: field 'score': must be a number or null, got list"),
]


@pytest.mark.parametrize(("kind", "change", "name", "words"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_bad_file_is_refused_naming_file_line_and_field_and_nothing_is_registered(tmp_path, kind, change, name,
                                                                                    words):
    folder = tmp_path / "run"
    shutil.copytree(template(kind), folder)
    change(folder)
    store = Store(tmp_path / "store")
    with pytest.raises(RunReportError, match=rf"{folder}/\S*{name}.*{words}"):
        register(store, "run", folder)
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("kind", sorted(BUILDERS))
@fuzz_settings(12)
@given(data=st.data())
def test_each_importer_reads_a_mutated_folder_whole_or_registers_nothing(kind, data):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "run"
        shutil.copytree(template(kind), folder)
        read, _ = input_files(folder)
        path = folder / data.draw(st.sampled_from(read))
        old = path.read_bytes()
        as_json = path.suffix == ".json" and data.draw(st.booleans())
        path.write_bytes(data.draw(mutated_document(json.loads(old)) if as_json else mutated_bytes(old)))
        store = Store(Path(tmp) / "store")
        if not judge(f"RL import: {kind}", lambda: register(store, "run", folder), (ApsftError,),
                     [str(path), str(folder)]):
            assert not (Path(tmp) / "store").exists()
