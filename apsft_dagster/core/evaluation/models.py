"""What an evaluation generates with, and how its generations are made and kept.

`model_of` holds the deployability rules: a merged model whose probe failed, or whose weights were
released, is refused by name. `generate_into` reuses rows whose key still holds.
"""

from __future__ import annotations

import sys

import polars as pl
from tqdm import tqdm

from apsft_dagster.core.base_model import base_model_path
from apsft_dagster.core.evaluation.generations import generate_policy
from apsft_dagster.core.layout import BASE_MODEL_REPORT, merged_dir, merged_report, probe_report
from apsft_dagster.core.policies import BASE
from apsft_dagster.core.progress import counted, pulsing


def model_of(store, config, policy: str) -> tuple[str, str]:
    """(model directory, fingerprint) of what a partition evaluates. A merged model that failed
    the deployment probe is not evaluated: the error names it."""
    if policy == BASE:
        return str(base_model_path(config, store)), store.get_json(BASE_MODEL_REPORT)["fingerprint"]
    probe = store.get_json(probe_report(policy))
    if store.get_json(merged_report(policy)).get("weights_kept") is False:
        raise RuntimeError(f"{policy}: its merged weights were released after evaluation (merge.keep_weights: false; "
                           f"{store.path(merged_report(policy))}); rematerialize merged_models for it first")
    if not probe["passed"]:
        raise RuntimeError(f"{policy}: its merged model answered exactly like base on every probe prompt "
                           f"({store.path(probe_report(policy))}); it is not evaluated")
    store.verify(merged_dir(policy))
    return str(store.path(merged_dir(policy))), store.get_json(merged_report(policy))["fingerprint"]


def generate_into(store, name: str, sources: list[str], engine, tasks: pl.DataFrame, fingerprint: str, model_dir: str,
                  allowance: int, desc: str, **sampling) -> tuple[str, dict]:
    """Generate `tasks` (rows of the `sources` artifacts whose key still holds are reused), with a
    progress bar in a terminal, else counted lines on stderr (one each half minute, and each tenth), and write
    them to `name`: (digest, figures)."""
    found = [store.get_parquet(n) for n in sources if store.exists(n)]
    previous = pl.concat(found, how="diagonal_relaxed") if found else None
    bar = tqdm(total=tasks.height, desc=desc, disable=not sys.stderr.isatty())
    logged = counted(desc, lambda line: print(f"  {line}", file=sys.stderr, flush=True))

    def progress(done: int, total: int) -> None:
        bar.update(done - bar.n)
        if bar.disable:
            logged(done, total)

    with pulsing(lambda line: tqdm.write(f"  {desc}: {line}", file=sys.stderr)):  # within a batch, each half minute
        frame, figures = generate_policy(engine, tasks, fingerprint, model_dir, allowance, previous, progress,
                                         **sampling)
    bar.close()
    return store.put_parquet(name, frame), figures
