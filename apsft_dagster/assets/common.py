"""Small helpers every asset module shares."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from urllib.parse import quote

import dagster as dg
import polars as pl
from tqdm import tqdm

OWNERS = ["team:apsft"]
# Every asset that holds a model engine (generation, scoring, training, merge) is in this Dagster
# concurrency pool: an instance with `concurrency: pools: default_limit: 1` runs at most one per
# node at a time while CPU assets run beside it (tests/test_pools.py).
GPU_POOL = "gpu"


def blocking_checks(asset: str, checks: dict[str, str]) -> list[dg.AssetCheckSpec]:
    """One blocking check spec per (name, description) of `checks`, on `asset`."""
    return [dg.AssetCheckSpec(name, asset=asset, description=text, blocking=True) for name, text in checks.items()]


def check_result(name: str, problems: list[str], blocks: bool = True,
                 description: str | None = None) -> dg.AssetCheckResult:
    """ERROR severity: a failed protocol check blocks every downstream stage. `blocks=False`: WARN, a
    failure recorded (in the UI, an alert, `apsft run`'s summary) while the run goes on."""
    return dg.AssetCheckResult(
        check_name=name, passed=not problems, description=description,
        severity=dg.AssetCheckSeverity.ERROR if blocks else dg.AssetCheckSeverity.WARN,
        metadata={"problems": len(problems), "first_problems": "\n".join(problems[:20]) or "none"},
    )


def png_markdown(data: bytes, alt: str) -> dg.MetadataValue:
    """A PNG shown inline in the asset's metadata."""
    return dg.MetadataValue.md(f"![{alt}]({_data_uri(data)})")


INLINE_MARKDOWN = 1000  # the UI shows Markdown metadata shorter than this in place, longer behind a link


def svg_markdown(svg: str, alt: str, caption: str) -> dg.MetadataValue:
    """A small SVG and a caption, short enough that the UI shows it in place (a ValueError when not)."""
    encoded = quote(svg, safe="/:=',.")
    text = f"![{alt}](data:image/svg+xml,{encoded}) {caption}"
    if len(text) >= INLINE_MARKDOWN:
        raise ValueError(f"{alt}: {len(text)} characters, the UI shows at most {INLINE_MARKDOWN - 1} in place")
    return dg.MetadataValue.md(text)


def report_markdown(markdown: str, plots: dict[str, bytes]) -> dg.MetadataValue:
    """A report for the UI: each `![alt](name.png)` link to a plot beside the report file becomes the
    plot itself (a data URI), since a relative link would resolve against the UI's own page. A
    link to a plot not given is an error, not a broken image."""
    import re

    by_name = {name if name.endswith(".png") else f"{name}.png": data for name, data in plots.items()}

    def inline(found: re.Match) -> str:
        if found[2] not in by_name:
            raise KeyError(f"the report links {found[2]!r}, which is not among its plots {sorted(by_name)}")
        return f"![{found[1]}]({_data_uri(by_name[found[2]])})"
    return dg.MetadataValue.md(re.sub(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)", inline, markdown))


def _data_uri(data: bytes) -> str:
    import base64

    return f"data:image/png;base64,{base64.b64encode(data).decode()}"


def table_preview(frame: pl.DataFrame, rows: int = 10, *, transpose_on: str | None = None) -> dg.MetadataValue:
    """The first `rows` rows as a Markdown table, numbers rounded for display (the stored table keeps
    full precision). `transpose_on` names a column whose values become the columns, one row per
    other field, so a table with many fields and few rows fits the page."""
    frame = frame.head(rows)
    if transpose_on is not None:
        names = [str(v) for v in frame[transpose_on]]
        fields = [c for c in frame.columns if c != transpose_on]
        cells = [[_shown(v) for v in frame[c]] for c in fields]
        frame = pl.DataFrame([{"field": f, **dict(zip(names, row))} for f, row in zip(fields, cells)],
                             schema={"field": pl.String, **{n: pl.String for n in names}})
    return dg.MetadataValue.md(_markdown(frame))


def _shown(value) -> str:
    """4 significant places below 1,000, whole numbers with separators above; the rest as written."""
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def _markdown(frame: pl.DataFrame) -> str:
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(_shown(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join([header, rule, *body])


def _log_kept(context: dg.AssetExecutionContext, kept: list[tuple[int, str]], total: int) -> None:
    """`[1-222/360] 222 kept (verified): caravan-L1-000 .. foundry_ledger-L3-021`, and empty the run."""
    if kept:
        (first, first_id), (last, last_id) = kept[0], kept[-1]
        span = f"{first + 1}" if first == last else f"{first + 1}-{last + 1}"
        ids = first_id if first == last else f"{first_id} .. {last_id}"
        context.log.info(f"[{span}/{total}] {len(kept)} kept (verified): {ids}")
        kept.clear()


def log_and_show(context: dg.AssetExecutionContext) -> Callable[[str], None]:
    """Progress lines for the run's log and for the person watching on stderr (Dagster's console
    log shows warnings only unless `apsft run --verbose`): every line in a terminal; where stderr is
    a pipe or a file (`apsft run | tee run.log`, CI), the counted lines `core.progress.Throttle` lets
    through, one each half minute at most apart but for an item's own time, and about ten a stage."""
    from apsft_dagster.core.progress import shown

    show = shown(context.asset_key.to_user_string())

    def say(message: str) -> None:
        context.log.info(message)
        show(message)
    return say


def shard_work(store, bank: str, make: Callable[[dict, str], tuple[str, str, dict]],
               keyer=None) -> Callable[[str], dict]:
    """A bank's work for the second core's helper (workers/local.py): one task's shard by id,
    made with the bank's own `make` (kept when the shard is there; the step decided which to remake),
    its key recorded first by `keyer`."""
    from apsft_dagster.core.layout import TASK_CATALOG, shard_file

    catalog = store.get_parquet(TASK_CATALOG)
    make = make if keyer is None else keyer.keyed(make)

    def work(task_id: str) -> dict:
        name = shard_file(bank, task_id)
        if store.exists(name):
            return {"action": "kept", "figures": {}}
        _, action, figures = make(catalog.filter(pl.col("task_id") == task_id).row(0, named=True), name)
        return {"action": action, "figures": figures}
    return work


def _remove_remade(store, bank: str, decisions: dict[str, str], say: Callable[[str], None]) -> None:
    """Shards to remake (stale, or `--recompute`) go before the loop, so both cores see them as to do."""
    from apsft_dagster.core.layout import shard_file

    remade = Counter(d for d in decisions.values() if d in ("stale", "recompute"))
    for task_id, decision in decisions.items():
        if decision in remade:
            store.remove(shard_file(bank, task_id))
    why = {"stale": "stale (an upstream shard changed)", "recompute": "made under other settings (--recompute)"}
    if remade:
        say("remaking " + ", ".join(f"{n} {why[d]}" for d, n in remade.items()))


def _hand_over(share, todo: list[str]) -> bool:
    """A Ray pool takes every shard to make at once; the second core, once the first made says the
    rest is worth it (`expect_after`): True where the loop must tell it then."""
    if share is not None and share.upfront:
        share.expect(todo).open()
    return share is not None and not share.upfront


def fill_shards(context: dg.AssetExecutionContext, store, bank: str, tasks: pl.DataFrame,
                make: Callable[[dict, str], tuple[str, str, dict]], share=None, keyer=None) -> dg.MaterializeResult:
    """The resumable per-task loop of every task-partitioned bank.

    A shard that exists and verifies is kept; otherwise `make(task_row, shard_file)` writes it
    through the store and returns (digest, action, figures). Shards are atomic, so a killed run
    leaves none half-written and a rerun picks up where it stopped. Each task partition gets its
    own metadata (action, shard SHA-256, figures) through `add_asset_metadata(partition_key=...)`,
    Dagster 1.13's per-partition record in a single-run backfill; the data version stays run-wide
    (1.13 has no supported per-partition data version in one run). Progress goes to the Dagster
    log and, in a terminal, to a progress bar. `share` (workers/local.py) may share the shards
    still to make with a helper process, which takes them from the back, once the first shard made
    says the rest is worth it; the loop takes its (action, figures). `keyer` (core/bank_key_check.py)
    first decides every shard already there against this run's settings: kept, remade when stale or
    under `--recompute`, or the whole step refused (KeyMismatchError) before anything is written.
    """
    from apsft_dagster.core.bank_key_check import check_bank
    from apsft_dagster.core.layout import shard_file
    from apsft_dagster.core.progress import Pace, pulsing
    from apsft_dagster.core.store import json_bytes, sha256_bytes

    digests, counts, pace, kept, say = {}, Counter(), Pace(tasks.height), [], log_and_show(context)
    if keyer is not None:
        _remove_remade(store, bank, check_bank(keyer, tasks), say)
        make = keyer.keyed(make)
    rows = tasks.sort("task_id").iter_rows(named=True)
    todo = [t for t in tasks.sort("task_id")["task_id"] if not store.exists(shard_file(bank, t))]
    first = _hand_over(share, todo)
    for i, task in enumerate(tqdm(rows, total=tasks.height, desc=bank, disable=not sys.stderr.isatty())):
        name = shard_file(bank, task["task_id"])
        got = share.result(task["task_id"]) if share is not None else None
        if got is not None:
            digest, action, figures = store.verify(name), got["action"], got["figures"]  # its receipt, re-hashed
        elif store.exists(name):
            digest, action, figures = store.verify(name), "kept", {}
        else:
            began = time.perf_counter()
            with pulsing(lambda line: say(f"{task['task_id']}: {line}")):  # a long task's batch, each half minute
                digest, action, figures = make(task, name)
            if first:
                share.expect_after(time.perf_counter() - began, todo[todo.index(task["task_id"]) + 1:]).open()
                first = False
        digests[task["task_id"]] = digest
        counts[action] += 1
        context.add_asset_metadata({"action": action, "shard_sha256": digest, **figures,  # and which worker, where
                                    **(share.placed(task["task_id"]) if share else {})}, partition_key=task["task_id"])
        pace_note = pace.step(action != "kept", *(share.pace() if share is not None else ()))
        if action == "kept":  # a run of kept shards is one log line, not one each
            kept.append((i, task["task_id"]))
            continue
        _log_kept(context, kept, tasks.height)
        shown = ", ".join(f"{k} {v}" for k, v in figures.items())
        line = f"[{i + 1}/{tasks.height}] {task['task_id']}: {action}" + (f" ({shown})" if shown else "") + pace_note
        if sys.stderr.isatty():  # the bar is the live line; the log gets each task
            context.log.info(line)
        else:
            say(line)
    _log_kept(context, kept, tasks.height)
    return dg.MaterializeResult(metadata={"tasks_in_run": tasks.height, **counts},
                                data_version=dg.DataVersion(sha256_bytes(json_bytes(digests))))
