"""A task file pinned by its SHA-256 (docs/task-files.md): `load_config` resolves `tasks.source` against the
profile file and checks the digest here before anything reads a row (this module imports no config: the config
calls it)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from apsft_dagster.core.errors import ConfigError
from apsft_dagster.core.task_file.names import unknown_cells
from apsft_dagster.core.tasks import BUILDERS, STEPS_BY_LEVEL


def bind_task_file(config, profile: Path) -> None:
    """Resolve `tasks.source` against the profile file (or as an absolute path), check that it is there with the
    SHA-256 the profile pins, and bind it to the config (a ConfigError otherwise; also for an embedded model whose
    train cells the builders do not know: it pretrains on theirs, core/embedded/build.py)."""
    tasks = config.tasks
    if (tasks.source is None) != (tasks.source_sha256 is None):
        raise ConfigError(f"{profile}: tasks.source and tasks.source_sha256 go together: pin the task file's "
                          "SHA-256 (`sha256sum FILE`; `apsft export-tasks` prints it)")
    if config.model.source == "embedded" and (unknown := unknown_cells(tasks.train)):
        raise ConfigError(f"{profile}: model.source: the embedded model pretrains and capability-checks on the "
                          f"builders' families {list(BUILDERS)} and levels {list(STEPS_BY_LEVEL)}, and tasks.train "
                          f"names {unknown}, which only the task file holds; set model.source: local with model.path: "
                          "your snapshot (docs/task-files.md)")
    written = Path(tasks.source)
    path = written if written.is_absolute() else profile.parent / written
    if not path.is_file():
        raise ConfigError(f"{profile}: tasks.source: no file {path}; write the task file there (`apsft export-tasks`"
                          " writes the builders' tasks as one) or fix the path (relative to the profile)")
    verified(path, tasks.source_sha256, profile)
    config._task_file = path


def verified(path: Path, sha256: str, profile: Path | str) -> bytes:
    """The file's bytes, when their SHA-256 is the pinned one."""
    data = path.read_bytes()
    if (actual := hashlib.sha256(data).hexdigest()) != sha256:
        raise ConfigError(f"{profile}: tasks.source_sha256: {path} has SHA-256 {actual}, the profile pins {sha256}; "
                          "restore the file, or pin the new digest (a new config digest: a new study)")
    return data
