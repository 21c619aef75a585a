"""The one stage runner: every wing's stages run through it (`apsft run`, the sibling commands, the tests).

Each stage is one job; a partitioned stage runs its selected partitions as single runs over
contiguous key ranges. A stage stops the sequence when a run fails or an ERROR check fails (a
failed WARN check is recorded and listed, and the sequence goes on: docs/PROTOCOL.md §6). Outcomes
are read back from the instance's event log, the same whether the run executed in this process
or, for an engine stage on a GPU, in a child process (so its memory returns to the device).
Alerts for each finished run follow the sensors' rules (`sensors.rules.run_alerts`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import dagster as dg

from apsft_dagster.core.alerts import deliver
from apsft_dagster.profile import Choice
from apsft_dagster.run_recovery import release_abandoned, this_process
from apsft_dagster.run_tags import RUNNER_TAG, single_run_tags
from apsft_dagster.run_waiting import attended
from apsft_dagster.sensors.rules import run_alerts
from apsft_dagster.stage import Stage


@dataclass
class StageOutcome:
    job: str
    run_ids: list[str] = field(default_factory=list)
    success: bool = True
    checks: list[tuple[str, str, bool]] = field(default_factory=list)  # (asset, check, passed)
    recorded: list[tuple[str, str]] = field(default_factory=list)  # failed WARN checks: listed, never a stop
    notes: dict[str, str] = field(default_factory=dict)  # "asset:check" -> a failed check's description
    materialized: dict[str, int] = field(default_factory=dict)  # asset -> materializations (partitions)
    figures: dict[str, dict] = field(default_factory=dict)  # asset -> numeric metadata of its last materialization
    alerts: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    skipped: bool = False  # a stage whose partitions are decided at run time had none to run

    @property
    def ok(self) -> bool:
        return self.success and all(passed or (asset, check) in self.recorded for asset, check, passed in self.checks)


def key_ranges(keys: Sequence[str], all_keys: Sequence[str]) -> list[list[str]]:
    """The selected keys as maximal runs of consecutive keys in the partition order."""
    position = {k: i for i, k in enumerate(all_keys)}
    unknown = [k for k in keys if k not in position]
    if unknown:
        raise ValueError(f"unknown partition keys {unknown}; known keys run {all_keys[0]} .. {all_keys[-1]}")
    ranges: list[list[str]] = []
    for k in sorted(set(keys), key=position.__getitem__):
        if ranges and position[ranges[-1][-1]] + 1 == position[k]:
            ranges[-1].append(k)
        else:
            ranges.append([k])
    return ranges


def select_stages(stages: Sequence[Stage], start: str | None = None, stop: str | None = None) -> list[Stage]:
    """A wing's stages from `start` through `stop` (both inclusive; default: all)."""
    names = [s.job for s in stages]
    for flag, name in (("--from", start), ("--to", stop)):
        if name is not None and name not in names:
            raise ValueError(f"{flag} {name!r}: no such stage; stages are {', '.join(names)}")
    first, last = names.index(start) if start else 0, names.index(stop) if stop else len(names) - 1
    if first > last:
        raise ValueError(f"--from {start} comes after --to {stop}")
    return list(stages[first:last + 1])


def run_stages(defs: dg.Definitions, instance: dg.DagsterInstance, stages: Sequence[Stage], *,
               partition_keys: dict[str, list[str]] | None = None, isolate: Callable[[Stage], bool] = lambda s: False,
               origin=None, verbose: bool = False, alert: bool = True,
               on_stage: Callable[[StageOutcome], None] = lambda o: None,
               guard: Callable[[Stage], AbstractContextManager] = lambda s: nullcontext()) -> list[StageOutcome]:
    """Run `stages` in order until one fails; `partition_keys` narrows a stage to some partitions
    (job name -> keys); `isolate(stage)` runs that stage's runs in a child process; `origin` (see
    `workspace_origin`) makes every run belong to the UI's code location; `guard(stage)` is held
    around a stage's runs, when it has any (`apsft run`: the machine's GPU, core/device_slot.py)."""
    release_abandoned(instance)
    outcomes = []
    for stage in stages:
        started = time.monotonic()
        outcome = StageOutcome(stage.job)
        keys = (partition_keys or {}).get(stage.job)
        if keys is None and stage.keys_at_run is not None:
            keys = stage.keys_at_run(defs)
            outcome.skipped = not keys
        runs = _run_tags(stage, keys, instance)
        with guard(stage) if runs else nullcontext():
            for tags in runs:
                tags = {**tags, RUNNER_TAG: this_process()}
                execute = _execute_in_child if isolate(stage) else _execute
                run_id = execute(defs, stage.job, instance, tags, verbose, origin)
                _collect(instance, run_id, outcome)
                if alert:
                    outcome.alerts += [deliver(a) for a in run_alerts(instance, run_id)]
                if not outcome.ok:
                    break
        outcome.seconds = time.monotonic() - started
        outcomes.append(outcome)
        on_stage(outcome)
        if not outcome.ok:
            break
    return outcomes


def run_partition(defs: dg.Definitions, instance: dg.DagsterInstance, stages: Sequence[Stage], partitions: str,
                  key: str, **options) -> list[StageOutcome]:
    """A sibling wing's stages for one key of its dynamic partitions `partitions` (added to the
    instance if new, so the UI lists it); `options` as for `run_stages`."""
    keys = {s.job: [key] for s in stages if isinstance(s.partitions_def, dg.DynamicPartitionsDefinition)}
    return run_stages(defs, instance, stages, partition_keys=keys, **options)


def run_wing_partition(stages: Sequence[Stage], partitions: str, key: str, choice: Choice, store: str,
                       on_stage: Callable[[StageOutcome], None] = lambda outcome: None) -> bool:
    """`run_partition` with the merged definitions for `choice` (profile, config file, store) on the
    instance of `store` (the location the wing writes); False, after saying where it stopped, when a
    run or a check failed (the sibling wings' commands)."""
    from apsft_dagster.core.paths import ensure_dagster_home
    from apsft_dagster.definitions import definitions_for  # the definitions load only when a wing runs

    ensure_dagster_home(store)
    outcomes = run_partition(definitions_for(*choice), dg.DagsterInstance.get(), stages, partitions, key,
                             on_stage=on_stage)
    if not all(o.ok for o in outcomes):
        print(f"apsft: {key} stopped at {outcomes[-1].job}; `apsft ui` shows the failed run or check", file=sys.stderr)
        return False
    return True


def check_partition_keys(stages: Sequence[Stage], keys: dict[str, list[str]]) -> None:
    """Keys asked for by hand must be partitions the stage defines (they name store paths), or for
    dynamic partitions keys the stage knows: a ValueError names the unknown ones before anything
    runs (and before any is added to the instance). A sibling wing's dynamic keys are names, checked
    where they are registered."""
    for stage in stages:
        wanted, defined = keys.get(stage.job), stage.partitions_def
        if not wanted or defined is None:
            continue
        dynamic = isinstance(defined, dg.DynamicPartitionsDefinition)
        if dynamic and stage.known_keys is None:
            continue
        known = list(stage.known_keys) if dynamic else defined.get_partition_keys()
        unknown = sorted(set(wanted) - set(known))
        if unknown:
            raise ValueError(f"{stage.job}: {', '.join(map(repr, unknown[:5]))} "
                             f"{'is not a partition' if len(unknown) == 1 else 'are not partitions'} of it "
                             f"(e.g. {', '.join(known[:3])}; {len(known)} in all)")


def _run_tags(stage: Stage, keys: list[str] | None, instance: dg.DagsterInstance) -> list[dict[str, str]]:
    """One run per maximal range of consecutive keys; dynamic keys are added to the instance first
    (a key already there is left as it is) and ordered as the instance lists them."""
    defined = stage.partitions_def
    if defined is None:
        return [{}]
    if isinstance(defined, dg.DynamicPartitionsDefinition):
        if not keys:
            return []
        instance.add_dynamic_partitions(defined.name, list(dict.fromkeys(keys)))
        all_keys = instance.get_dynamic_partitions(defined.name)
    else:
        all_keys = defined.get_partition_keys()
    chosen = keys if keys is not None else list(stage.default_keys or all_keys)
    return [single_run_tags(r) for r in key_ranges(chosen, all_keys)] if chosen else []


def _run_config(verbose: bool) -> dict:
    """In-process executor (one process per stage run), Dagster's console log only with --verbose."""
    config: dict = {"execution": {"config": {"in_process": {}}}}
    if not verbose:
        config["loggers"] = {"console": {"config": {"log_level": "WARNING"}}}
    return config


def workspace_origin(workspace_yaml: str = "workspace.yaml"):
    """The code location `apsft ui` loads (workspace.yaml): runs that carry its origin show under
    their jobs and on the timeline, and its sensors see them. None when there is no workspace file."""
    # private: no public API reads a workspace file into code location origins (the UI's own loader)
    from dagster._core.workspace.load import location_origins_from_yaml_paths

    from apsft_dagster.core.paths import PROJECT_ROOT

    path = PROJECT_ROOT / workspace_yaml
    return location_origins_from_yaml_paths([str(path)])[0] if path.is_file() else None


def _execute(defs: dg.Definitions, job: str, instance: dg.DagsterInstance, tags: dict, verbose: bool,
             origin=None) -> str:
    """One run of `job` in this process; with `origin` (a code location origin) the run belongs to
    that code location, as a run launched from the UI would. A wait for a pool slot is said (run_waiting.py)."""
    from dagster._core.utils import make_new_run_id

    job_def, run_id = defs.resolve_job_def(job), make_new_run_id()
    with attended(instance, run_id, job_def.graph.pools):
        if origin is None:
            return job_def.execute_in_process(instance=instance, tags=tags, run_config=_run_config(verbose),
                                              raise_on_error=False, run_id=run_id).run_id
        # private: execute_in_process cannot give a run a code location's origin, and only such runs show
        # under their job in the UI and reach its sensors; these three create and execute one that has it
        from dagster._core.definitions.job_base import InMemoryJob
        from dagster._core.execution.api import execute_run
        from dagster._core.remote_origin import RemoteRepositoryOrigin

        run = instance.create_run_for_job(
            job_def=job_def, run_config=_run_config(verbose), tags={**job_def.run_tags, **tags}, run_id=run_id,
            remote_job_origin=RemoteRepositoryOrigin(origin, "__repository__").get_job_origin(job))
        return execute_run(InMemoryJob(job_def), run, instance, raise_on_error=False).run_id


def _execute_in_child(defs: dg.Definitions, job: str, instance: dg.DagsterInstance, tags: dict, verbose: bool,
                      origin=None) -> str:
    """The same run in a fresh interpreter over the same instance (DAGSTER_HOME) and environment:
    the definitions load from `apsft_dagster.definitions` there, so `defs` must be those."""
    cmd = [sys.executable, "-m", "apsft_dagster.runner", job, json.dumps(tags)]
    cmd += (["--verbose"] if verbose else []) + (["--code-location"] if origin is not None else [])
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"stage {job}: the child process exited with {proc.returncode} before reporting a run")
    return json.loads(lines[-1])["run_id"]


def _collect(instance: dg.DagsterInstance, run_id: str, outcome: StageOutcome) -> None:
    outcome.run_ids.append(run_id)
    outcome.success &= instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.SUCCESS
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
        e = entry.dagster_event.asset_check_evaluation_data
        asset = e.asset_key.to_user_string()
        outcome.checks.append((asset, e.check_name, e.passed))
        if not e.passed and e.severity == dg.AssetCheckSeverity.WARN:
            outcome.recorded.append((asset, e.check_name))
        if not e.passed and e.description:
            outcome.notes[f"{asset}:{e.check_name}"] = e.description
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        m = entry.dagster_event.event_specific_data.materialization
        key = m.asset_key.to_user_string()
        outcome.materialized[key] = outcome.materialized.get(key, 0) + 1
        outcome.figures[key] = {k: v.value for k, v in m.metadata.items()
                                if k == "cache" or isinstance(v.value, (int, float)) and not isinstance(v.value, bool)}


def main(argv: list[str] | None = None) -> int:
    """Child-process entry: run one job of `apsft_dagster.definitions` and print its run id."""
    args = sys.argv[1:] if argv is None else argv
    from apsft_dagster.definitions import defs

    origin = workspace_origin() if "--code-location" in args else None
    run_id = _execute(defs, args[0], dg.DagsterInstance.get(), json.loads(args[1]), "--verbose" in args, origin)
    print(json.dumps({"run_id": run_id}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
