"""An imported run put together: metrics by step, checkpoints and adapters when the source has
them, rollout dumps when present, and run metadata from what the source records."""

from __future__ import annotations

from pathlib import Path

from apsft_dagster.core.run_report import schema
from apsft_dagster.core.run_report.folder import NOT_RECORDED, Reader, RunFolder, missing_sections
from apsft_dagster.core.run_report.importers import metrics, rollout_dumps
from apsft_dagster.core.run_report.importers.checkpoints import Saved


def config(folder: Path, *, name: str | None = None, base_model: str | None = None, steps: int | None = None,
           batch_size: int | None = None, platform: str = "") -> schema.TrainingConfig:
    """Run metadata from the source: the folder's name as id (and name, unless the source names the run)."""
    return schema.TrainingConfig(
        run=schema.RunMeta(id=folder.name, name=name or folder.name, base_model=base_model or NOT_RECORDED,
                           platform=platform),
        training=schema.TrainingMeta(steps=steps or None, batch_size=batch_size or None, rollouts_per_example=None))


def run_folder(folder: Path, reader: Reader, table: metrics.StepTable, source: str, files: str,
               run_config: schema.TrainingConfig, saved: Saved | None = None) -> RunFolder:
    """The RunFolder of an imported source; every section it lacks is None and named in `not_recorded`."""
    evals = metrics.eval_summary(table, files)
    reward, reward_key = metrics.train_reward(table)
    rollouts = rollout_dumps.load(folder, reader)
    checkpoints = saved.checkpoints if saved else None
    adapters = saved.adapters if saved else None
    notes = metrics.notes(evals, reward_key) + rollout_dumps.notes(rollouts) + (saved.notes if saved else ())
    return RunFolder(config=run_config, evals=evals, train_reward=reward, usage=None, checkpoints=checkpoints,
                     adapters=adapters, rollouts=rollouts, sha256=dict(sorted(reader.sha256.items())),
                     source_format=source, not_recorded=missing_sections(reward, None, checkpoints, adapters,
                                                                         rollouts),
                     sizes=dict(sorted(reader.sizes.items())), notes=notes)
