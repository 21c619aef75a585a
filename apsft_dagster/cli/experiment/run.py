"""`apsft run`: preflight every stage about to run, then run the experiment's stages in order.

The config is validated before Dagster or torch is imported, so a bad profile fails in well
under two seconds and writes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys

from apsft_dagster.cli.args import export_choice, profile_arguments
from apsft_dagster.cli.experiment import review_point, scale
from apsft_dagster.cli.experiment.presentation import print_stage, summary
from apsft_dagster.core.config import load_config
from apsft_dagster.core.paths import ensure_dagster_home
from apsft_dagster.core.rehearsal import declared
from apsft_dagster.core.store_owner import adopt, refuse_another


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="materialize every stage, in order")
    profile_arguments(p)
    p.add_argument("--from", dest="start", metavar="STAGE",
                   help="start at this stage job (earlier stages' artifacts must exist)")
    p.add_argument("--to", dest="stop", metavar="STAGE", help="stop after this stage job")
    p.add_argument("--partitions", action="append", metavar="JOB=KEY[,KEY...]",
                   help="run only these partitions of a partitioned stage (repeatable)")
    p.add_argument("--recompute", action="store_true",
                   help="remake the bank shards made under other settings than this config's (default: refuse)")
    p.add_argument("--verbose", action="store_true", help="show Dagster's own log (debug level)")
    review_point.add_arguments(p)  # --pause-after, --resume, --by
    scale.add_arguments(p)  # --ray [ADDRESS], --devices N
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Preflight every stage about to run, then run them in order through the stage runner."""
    config = load_config(args.profile, args.config)
    chosen = export_choice(args)  # the definitions' values; the environment's for a stage's child process
    if not args.verbose:  # Hugging Face's per-load progress bars; the stages' own progress stays
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from apsft_dagster.core.engines.lifetime import preflight
    from apsft_dagster.core.object_store import open_store
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
    unrecorded = refuse_another(open_store(store), config, store)  # a store of another profile: refused here
    # the design anchor and the review points (core/freeze.py, core/review.py): refused here, nothing written yet
    stages, pause = review_point.before_run(args, config, store, stages)
    if (refused := _bank_keys(open_store(store), config, stages, args.recompute)) is not None:
        print(f"apsft: {refused}", file=sys.stderr)
        return 2
    on_ray = scale.join(args, config)  # a cluster nobody answers at, or without a device: refused, nothing written
    print(f"apsft run: profile {config.profile} (config {config.digest[:12]}), {config.compute.device} "
          f"{config.compute.dtype}, store {store}", flush=True)
    if config.rehearsal:
        print(f"  {declared(config)}", flush=True)
    if on_ray:
        print(f"  {on_ray}", flush=True)
    review_point.record_resume(args, config, store)  # --resume: who and when, once every check passed
    if unrecorded:  # a new store, or one from before stores recorded their profile: it is this profile's now
        print(f"apsft run: {adopt(open_store(store), config, store)}", flush=True)
    from apsft_dagster.run_recovery import said, sweep_leftovers  # dagster: imported only to run

    said(sweep_leftovers(store))
    ensure_dagster_home(store)  # the store's own instance: what the UI shows of it is its own (issue 58)
    import dagster as dg

    from apsft_dagster.cli.experiment.gpu_guard import gpu_guard
    from apsft_dagster.core.engines.memory import freeze_loaded
    from apsft_dagster.definitions import definitions_for
    from apsft_dagster.runner import workspace_origin

    defs = definitions_for(*chosen)
    freeze_loaded()  # the imports and definitions stay; the collector walks only what the stages allocate
    gpu = config.compute.device == "cuda"
    outcomes = run_stages(defs, dg.DagsterInstance.get(), stages, partition_keys=keys, verbose=args.verbose,
                          isolate=lambda stage: gpu and stage.engine, origin=workspace_origin(),
                          on_stage=print_stage, guard=gpu_guard(config, store))  # one engine per GPU, any store
    code = summary(outcomes, stages, store)
    review_point.after_run(config, store, pause, outcomes)  # a review point reached: recorded, with how to resume
    return code


BANK_STAGES = ("trace_bank_job", "bank_and_parity_job", "score_bank_job", "score_bank_index_job", "r1_labels_job",
               "r1_labels_index_job", "evidence_seal_job")  # the stages that make, index or seal the banks


def _bank_keys(store, config, stages, recompute: bool) -> str | None:
    """Before anything is written: the refusal when the store's bank shards were made under other settings
    (core/bank_key_check.py); with `--recompute`, say what will be remade and hand the choice to the stages."""
    if not any(s.job in BANK_STAGES for s in stages):
        return None
    from apsft_dagster.core.bank_key_check import RECOMPUTE_ENV, preflight

    refused, remade = preflight(store, config, recompute)
    for line in remade:
        print(f"apsft run: {line}", flush=True)
    os.environ[RECOMPUTE_ENV] = "1" if recompute else ""
    return refused


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
