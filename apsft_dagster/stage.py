"""A stage: one job over some assets, in a wing's order. Every wing lists its stages as these;
the runner (`runner.run_stages`) runs them, and `stage_jobs` turns them into Dagster jobs."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import dagster as dg

from apsft_dagster.run_tags import engine_tags


@dataclass(frozen=True)
class Stage:
    job: str
    assets: tuple[dg.AssetsDefinition, ...]
    engine: bool = False  # loads a model on compute.device (generation, scoring, training)
    default_keys: tuple[str, ...] | None = None  # the partitions `apsft run` runs unless told otherwise (all)
    # Partitions decided at run time from what earlier stages wrote (e.g. Stage B's plan); an
    # empty list skips the stage. Dynamic partitions get these keys added before the stage runs.
    keys_at_run: Callable[[dg.Definitions], list[str]] | None = None
    # The keys a dynamic partition set may be given (`--partitions` is checked against them); None:
    # any name (a sibling wing's datasets and runs)
    known_keys: tuple[str, ...] | None = None
    # SQL audits join the first such stage at or after the stage that writes their inputs
    # (assets/audits.py `place_audits`)
    hosts_audits: bool = False

    @property
    def partitions_def(self) -> dg.PartitionsDefinition | None:
        return next((a.partitions_def for a in self.assets if a.partitions_def is not None), None)


def stage_assets(stages: Sequence[Stage]) -> list[dg.AssetsDefinition]:
    """Each asset once (a stage may select an asset again, as the replication stages do)."""
    return list(dict.fromkeys(a for stage in stages for a in stage.assets))


def stage_jobs(stages: Sequence[Stage],
               environ: Mapping[str, str] = os.environ) -> list[dg.UnresolvedAssetJobDefinition]:
    """One job per stage; engine stages carry `run_tags.engine_tags` (the Kubernetes GPU request only
    where runs launch on Kubernetes), read from the environment once for all of them."""
    engine = engine_tags(environ)
    return [dg.define_asset_job(s.job, selection=list(s.assets), tags=dict(engine) if s.engine else {})
            for s in stages]
