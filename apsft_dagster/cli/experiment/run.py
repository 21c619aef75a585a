"""`apsft run`: preflight every stage about to run, then run the experiment's stages in order.

The config is validated before Dagster or torch is imported, so a bad profile fails in well
under two seconds and writes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys

from apsft_dagster.cli.args import export_choice, profile_arguments
from apsft_dagster.core.config import load_config
from apsft_dagster.core.rehearsal import declared
from apsft_dagster.core.paths import ensure_dagster_home
from apsft_dagster.cli.experiment.presentation import print_stage, summary


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="materialize every stage, in order")
    profile_arguments(p)
    p.add_argument("--from", dest="start", metavar="STAGE",
                   help="start at this stage job (earlier stages' artifacts must exist)")
    p.add_argument("--to", dest="stop", metavar="STAGE", help="stop after this stage job")
    p.add_argument("--partitions", action="append", metavar="JOB=KEY[,KEY...]",
                   help="run only these partitions of a partitioned stage (repeatable)")
    p.add_argument("--verbose", action="store_true", help="show Dagster's own log (debug level)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Preflight every stage about to run, then run them in order through the stage runner."""
    config = load_config(args.profile, args.config)
    export_choice(args)
    if not args.verbose:  # Hugging Face's per-load progress bars; the stages' own progress stays
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from apsft_dagster.core.engines.lifetime import preflight
    from apsft_dagster.core.paths import store_root
    from apsft_dagster.experiment.stages import STAGES
    from apsft_dagster.runner import check_partition_keys, run_stages, select_stages

    try:
        stages = select_stages(STAGES, args.start, args.stop)
        keys = _partition_keys(args.partitions, {s.job for s in stages})
        check_partition_keys(stages, keys)
    except ValueError as exc:
        print(f"apsft: {exc}", file=sys.stderr)
        return 2
    for stage in stages:  # before anything is written: a missing device or kernel stops the whole run here
        if stage.engine:
            preflight(config, stage.job)
    store = args.store or str(store_root(config.profile))
    print(f"apsft run: profile {config.profile} (config {config.digest[:12]}), {config.compute.device} "
          f"{config.compute.dtype}, store {store}", flush=True)
    if config.rehearsal:
        print(f"  {declared(config)}", flush=True)
    from apsft_dagster.run_recovery import said, sweep_leftovers  # dagster: imported only to run

    said(sweep_leftovers(store))
    ensure_dagster_home()
    import dagster as dg

    from apsft_dagster.core.engines.memory import freeze_loaded
    from apsft_dagster.definitions import defs
    from apsft_dagster.runner import workspace_origin

    freeze_loaded()  # the imports and definitions stay; the collector walks only what the stages allocate
    gpu = config.compute.device == "cuda"
    outcomes = run_stages(defs, dg.DagsterInstance.get(), stages, partition_keys=keys, verbose=args.verbose,
                          isolate=lambda stage: gpu and stage.engine, origin=workspace_origin(),
                          on_stage=print_stage)
    return summary(outcomes, stages, store)


def _partition_keys(specs: list[str] | None, jobs: set[str]) -> dict[str, list[str]]:
    """`--partitions JOB=KEY,KEY` (repeatable) -> {job: keys}."""
    keys: dict[str, list[str]] = {}
    for spec in specs or []:
        job, _, listed = spec.partition("=")
        if job not in jobs or not listed:
            raise ValueError(f"--partitions {spec!r}: use JOB=KEY[,KEY...] with a stage about to run "
                             f"({', '.join(sorted(jobs))})")
        keys.setdefault(job, []).extend(k for k in listed.split(",") if k)
    return keys
