"""TRL (Hugging Face Trainer) output folders: `trainer_state.json` and `checkpoint-<N>/` folders.

`trainer_state.json` is the Trainer's TrainerState: `global_step`, `train_batch_size`,
`best_metric`, `best_model_checkpoint` and `log_history`, a list of logged rows, each with its
`step` (train rows: `loss`, `reward`, `reward_std`, `rewards/<func>/mean`, `completions/mean_length`,
...; eval rows: the same keys prefixed `eval_`). The folder's own `trainer_state.json` is read when
there (`trainer.save_state()`), else the latest checkpoint's (its history is the whole run's).
"""

from __future__ import annotations

from pathlib import Path

from apsft_dagster.core.run_report.folder import Reader, RunFolder, fail
from apsft_dagster.core.run_report.importers import assemble, checkpoints, rollout_dumps
from apsft_dagster.core.run_report.importers.metrics import WAY_OUT, StepTable, step_of
from apsft_dagster.core.run_report.importers.trainer_json import document

NAME = "trl"
STATE = "trainer_state.json"
PLATFORM = "TRL / Hugging Face Trainer"


def claims(folder: Path) -> bool:
    return (folder / STATE).is_file() or any((p / STATE).is_file() for _, p in checkpoints.folders(folder))


def inputs(folder: Path) -> tuple[list[Path], list[Path]]:
    read, measured = checkpoints.inputs(folder)
    own = [folder / STATE] if (folder / STATE).is_file() else []
    return sorted(own + read + rollout_dumps.files(folder)), measured


def _optional_int(state: dict, key: str, path: Path) -> int | None:
    return None if state.get(key) is None else step_of(state[key], path, key)


def load(folder: Path) -> RunFolder:
    reader = Reader(folder)
    saved = checkpoints.load(folder, reader)
    if (folder / STATE).is_file():
        path = folder / STATE
        state = document(path, reader, dict)
    else:
        latest = max(saved.states)
        path, state = folder / f"checkpoint-{latest}" / STATE, saved.states[latest]
    history = state.get("log_history")
    if not isinstance(history, list):
        raise fail(path, "log_history", "missing or not a list; TrainerState keeps the logged rows there", WAY_OUT)
    table = StepTable()
    for i, row in enumerate(history):
        table.add_row(row, path, where=f"log_history.{i}.")
    run_config = assemble.config(folder, base_model=saved.base_model, platform=PLATFORM,
                                 steps=_optional_int(state, "global_step", path),
                                 batch_size=_optional_int(state, "train_batch_size", path))
    return assemble.run_folder(folder, reader, table, NAME, str(path), run_config, saved)
