"""A Weights & Biases run history export: `*.csv` (downloaded from the UI) or `*.json` (a list of
row objects, as `run.history()` / `run.scan_history()` give them) in the run folder.

CSV: a header with the step column (`_step`, or a chart export's `Step`) and metric columns; an
empty cell (W&B rows are sparse) or NaN is a missing value. A chart export names columns
`<run name> - <metric>` and adds `<...>__MIN` / `__MAX` columns: the prefix is taken as the run's
name and the MIN/MAX columns are left out. JSON rows carry `_step` and metric keys."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from apsft_dagster.core.run_report.folder import Reader, RunFolder, fail
from apsft_dagster.core.run_report.importers import assemble, rollout_dumps
from apsft_dagster.core.run_report.importers.metrics import WAY_OUT, StepTable, used
from apsft_dagster.core.run_report.importers.trainer_json import document

NAME = "wandb"
PLATFORM = "Weights & Biases (history export)"
STEP_COLUMNS = ("_step", "Step")
MISSING = ("", "nan", "NaN")


def files(folder: Path) -> list[Path]:
    return sorted(p for p in [*folder.glob("*.csv"), *folder.glob("*.json")] if p.is_file())


def claims(folder: Path) -> bool:
    return bool(files(folder))


def inputs(folder: Path) -> tuple[list[Path], list[Path]]:
    return sorted(files(folder) + rollout_dumps.files(folder)), []


def _columns(header: list[str]) -> tuple[list[str], str | None]:
    """Metric names by column (a chart export's `<run> - ` prefix cut) and that run name, if any."""
    others = [h for h in header if h not in STEP_COLUMNS]
    prefixes = {h.split(" - ", 1)[0] for h in others if " - " in h}
    if len(prefixes) == 1 and all(" - " in h for h in others):
        return [h.split(" - ", 1)[1] if " - " in h else h for h in header], prefixes.pop()
    return list(header), None


def _cell(text: str, path: Path, column: str, line: int) -> float | None:
    if text.strip() in MISSING:
        return None
    try:
        value = float(text)
    except ValueError:
        raise fail(path, column, f"{text[:40]!r} is not a number", WAY_OUT, line) from None
    return value if math.isfinite(value) else None


def _read_csv(path: Path, data: bytes, table: StepTable) -> str | None:
    try:
        rows = csv.reader(io.StringIO(data.decode("utf-8-sig"), newline=""))
        header = next(rows, [])
        step_col = next((i for i, h in enumerate(header) if h in STEP_COLUMNS), None)
        if step_col is None:
            raise fail(path, "_step", f"no step column ({' or '.join(STEP_COLUMNS)}) in the header", WAY_OUT, 1)
        names, run_name = _columns(header)
        for row in rows:
            line = rows.line_num
            if not row:
                continue
            if len(row) != len(header):
                raise fail(path, "(row)", f"has {len(row)} cells, the header {len(header)}", WAY_OUT, line)
            cell = row[step_col].strip()
            if not cell.isdigit():
                raise fail(path, header[step_col], f"a step is a whole number >= 0, got {cell[:40]!r}", WAY_OUT, line)
            for name, text, column in zip(names, row, header):
                if used(name) and not column.endswith(("__MIN", "__MAX")):
                    table.put(int(cell), name, _cell(text, path, column, line), path, column, line)
    except UnicodeDecodeError as exc:
        raise fail(path, "(file)", f"not valid UTF-8 (byte {exc.start})", "re-export the file as UTF-8") from None
    except csv.Error as exc:
        raise fail(path, "(file)", f"not valid CSV ({exc})", WAY_OUT) from None
    return run_name


def load(folder: Path) -> RunFolder:
    reader = Reader(folder)
    table = StepTable()
    names = []
    for path in files(folder):
        if path.suffix == ".csv":
            names.append(_read_csv(path, reader.read(path, WAY_OUT), table))
            continue
        for i, row in enumerate(document(path, reader, list)):
            table.add_row(row, path, where=f"{i}.")
    run_name = next((n for n in names if n), None)
    files_read = ", ".join(str(p) for p in files(folder))
    return assemble.run_folder(folder, reader, table, NAME, files_read,
                               assemble.config(folder, name=run_name, platform=PLATFORM))
