"""TensorBoard event files (`events.out.tfevents.*`, anywhere under the run folder), read with
TensorBoard's own reader (`event_file_loader`, which also migrates old `simple_value` scalars).
Scalar tags are the metric keys: TRL's through Hugging Face's callback (`train/reward`,
`eval/loss`, ...), verl's (`critic/score/mean`, `val-core/...`), OpenRLHF's (`train/reward`).

TensorBoard's reader stops quietly at a cut or damaged record (a live run's file grows); a
finished run's file must be whole, so the bytes its records span must be the file's size.
Needs the `tensorboard` extra (`pip install 'apsft[tensorboard]'`), imported only here."""

from __future__ import annotations

from pathlib import Path

from apsft_dagster.core.run_report.folder import Reader, RunFolder, RunReportError, fail
from apsft_dagster.core.run_report.importers import assemble, rollout_dumps
from apsft_dagster.core.run_report.importers.metrics import WAY_OUT, StepTable, number, step_of, used

NAME = "tensorboard"
PATTERN = "events.out.tfevents.*"
PLATFORM = "TensorBoard event files"
RECORD_FRAMING = 16  # a TFRecord: 8-byte length, 4-byte CRC, the data, 4-byte CRC


def files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob(PATTERN) if p.is_file())


def claims(folder: Path) -> bool:
    return bool(files(folder))


def inputs(folder: Path) -> tuple[list[Path], list[Path]]:
    return sorted(files(folder) + rollout_dumps.files(folder)), []


def _tensorboard():
    try:
        from tensorboard.backend.event_processing import event_file_loader
        from tensorboard.util import tensor_util
    except ImportError:
        raise RunReportError("reading TensorBoard event files needs TensorBoard: pip install 'apsft[tensorboard]' "
                             "(or export the run's scalars as a W&B CSV or JSON lines)") from None
    return event_file_loader, tensor_util


def _read_events(path: Path, size: int, table: StepTable) -> None:
    loader, tensor_util = _tensorboard()
    spanned = sum(len(record) + RECORD_FRAMING for record in loader.RawEventFileLoader(str(path)).Load())
    if spanned != size:
        raise fail(path, "(record)", f"cut or damaged at byte {spanned} of {size}: TensorBoard's reader stops "
                                     f"there", "copy the whole file again from the run")
    plugins: dict[str, str] = {}
    try:
        for event in loader.EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name:
                    plugins[value.tag] = value.metadata.plugin_data.plugin_name
                if plugins.get(value.tag) != "scalars" or not used(value.tag):
                    continue
                array = tensor_util.make_ndarray(value.tensor)
                if array.size != 1:
                    raise fail(path, value.tag, f"a scalar tag holds {array.size} values at step {event.step}", WAY_OUT)
                step = step_of(event.step, path, value.tag)
                table.put(step, value.tag, number(array.item(), path, value.tag), path, value.tag)
    except RunReportError:
        raise
    except Exception as exc:  # noqa: BLE001 - a record whose CRC holds but whose proto does not parse
        raise fail(path, "(record)", f"not a TensorBoard event ({type(exc).__name__})", WAY_OUT) from None


def load(folder: Path) -> RunFolder:
    reader = Reader(folder)
    table = StepTable()
    events = files(folder)
    for path in events:
        _read_events(path, len(reader.read(path, WAY_OUT)), table)
    names = ", ".join(str(p) for p in events)
    return assemble.run_folder(folder, reader, table, NAME, names, assemble.config(folder, platform=PLATFORM))
