"""The cost of a profile's run before it runs: `apsft plan` (docs/experiment.md, "The plan").

`plan(config, store=None, rehearsal=None) -> list[dict]`: one row per stage in pipeline order
(the embedded model build on embedded profiles, harvest, parity gate, scoring, R1 rollouts,
training, merge + deployment probe, Stage A evaluation, then Stage B's rows, each `conditional`),
then the total lines, then, for the registered protocol, the registered matrix at the registered
envelope. Every row: `kind` ("stage", "total", "registered"), `key`, `stage`, and where they
apply `work`, `counts` ("registered counts" or "store ..."), `tokens_upper` (from the allowances),
`tokens_expected` (None: unknown) with `expected_from`, `throughput` and `throughput_source`,
`hours_low`/`hours_high` (None: not priced) with `hours_basis` ("expected", "upper bound"),
`done` (share of the work the store holds), `budget` (the budget gate's verdict on training rows)
and `notes`; a stage row also `partitions` (relative sizes), `partition` (what one is) and `loads`,
which core/plan/wall.py prices on N devices (`add_walls` adds `wall_low`/`wall_high`).

`store`: a Store whose artifacts are read (verified) and never written; None: nothing has run.
`rehearsal`: the path of scripts/gpu_rehearsal.py's JSON; its figures replace the envelopes
(PlanError naming the file and the field when it is malformed). The profile's `plan` section
holds the envelopes (ConfigError when it has none); training's is `training.throughput_tokens_per_s`.
"""

from __future__ import annotations

from apsft_dagster.core.plan import registered
from apsft_dagster.core.plan.observed import observe
from apsft_dagster.core.plan.pricing import add_budgets, budget_of, price, registered_row, totals
from apsft_dagster.core.plan.rates import profile_rates, read_rehearsal, rehearsal_rates
from apsft_dagster.core.plan.stage_b_work import stage_b
from apsft_dagster.core.plan.stages import (
    harvest,
    merge_and_probe,
    model_build,
    parity_gate,
    r1_rollouts,
    scoring,
    stage_a_evaluation,
    training,
)
from apsft_dagster.core.policies import stage_a_policies

STAGE_A_PATH = (harvest, parity_gate, scoring, r1_rollouts, training)


def plan(config, store=None, rehearsal=None) -> list[dict]:
    """The rows of the plan (see the module doc); reads, never writes."""
    rates = rehearsal_rates(config, read_rehearsal(rehearsal)) if rehearsal is not None else profile_rates(config)
    seen = observe(config, store)
    stages = [model_build(config, seen)] if config.model.source == "embedded" else []
    stages += [build(config, seen) for build in STAGE_A_PATH]
    stages += [merge_and_probe(config, stage_a_policies(config), seen, "merge", "merge + deployment probe"),
               stage_a_evaluation(config, seen), *stage_b(config, seen)]
    rows = [price(stage, rates) for stage in stages]
    next(r for r in rows if r["key"] == "harvest")["notes"].extend(seen.notes)
    budget, source = budget_of(config, seen.amendment)
    add_budgets(rows, rates["training"], budget, source)
    rows += totals(rows)
    if registered.applies(config):
        rows.append(registered_row(config, budget))
    return rows
