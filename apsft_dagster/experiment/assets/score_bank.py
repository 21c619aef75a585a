"""parity + score: the gate between instruments, and the task-partitioned score bank."""

from collections.abc import Callable

import dagster as dg
import polars as pl

from apsft_dagster import workers
from apsft_dagster.assets.common import GPU_POOL, OWNERS, blocking_checks, check_result, fill_shards, shard_work
from apsft_dagster.core.bank import load_shards, write_index
from apsft_dagster.core.bank_key_check import Keyer
from apsft_dagster.core.harvest import TRACE_SCHEMA
from apsft_dagster.core.layout import PARITY_GATE, SCORE_BANK, TASK_CATALOG, TRACE_BANK, shard_file
from apsft_dagster.core.parity import (
    calibration_traces,
    gate_outcome,
    gate_problems,
    parity_report,
    score_calibration,
    scoring_instrument,
)
from apsft_dagster.core.score_bank import SCORE_SCHEMA, join_problems, non_finite, score_task
from apsft_dagster.core.task_file.source import train_task_ids
from apsft_dagster.experiment.assets.trace_bank import trace_bank, trace_bank_index
from apsft_dagster.experiment.partitions import train_task_partitions
from apsft_dagster.resources import ExperimentResource, ScoringResource

PARITY_CHECKS = {"within_threshold": "every metric's max |fast - reference| <= the frozen threshold; a failure "
                                     "is recorded (WARN) and scoring goes on with the reference instrument, or blocks "
                                     "(ERROR) where scoring.instrument: fast and scoring.on_failed_gate: stop"}


@dg.asset(pool=GPU_POOL, deps=[trace_bank_index], group_name="score", kinds={"pytorch", "json"}, owners=OWNERS,
          check_specs=blocking_checks("parity_gate", PARITY_CHECKS))
def parity_gate(context: dg.AssetExecutionContext, experiment: ExperimentResource,
                scorer: ScoringResource) -> dg.MaterializeResult:
    """Both instruments score fixed, task-diverse calibration traces; the receipt is kept either way. A
    failed gate stops the run only where the rule says (core/parity.py `scoring_instrument`)."""
    config, store = experiment.config(), experiment.store()
    bank, _, _ = load_shards(store, TRACE_BANK, train_task_ids(config), TRACE_SCHEMA)
    chosen = calibration_traces(bank, config.scoring.calibration_traces, config.seeds.experiment)
    tasks = {t: (p, a) for t, p, a in store.get_parquet(TASK_CATALOG).select("task_id", "prompt", "answer").iter_rows()}
    scored = {name: score_calibration(scorer.instrument(name), chosen, tasks) for name in ("reference", "fast")}
    report = parity_report(scored["reference"], scored["fast"], config.scoring.parity_threshold)
    report["calibration_trace_ids"] = chosen["trace_id"].to_list()
    digest = store.put_json(PARITY_GATE, report)
    stops, note = gate_outcome(report, config)
    context.log.info(f"parity gate {'passed' if report['passed'] else 'FAILED'}: {report['metrics']}; {note}")
    return dg.MaterializeResult(
        metadata={**{f"max_abs_{m}": v for m, v in report["metrics"].items()},
                  **{f"mean_abs_{m}": v for m, v in report["means"].items()}, "passed": report["passed"],
                  "threshold": report["threshold"], "calibration_traces": report["traces"], "scoring": note},
        data_version=dg.DataVersion(digest),
        check_results=[check_result("within_threshold", gate_problems(report), blocks=stops, description=note)],
    )


@dg.asset(pool=GPU_POOL, partitions_def=train_task_partitions, backfill_policy=dg.BackfillPolicy.single_run(),
          deps=[parity_gate, trace_bank], group_name="score", kinds={"pytorch", "parquet"}, owners=OWNERS)
def score_bank(context: dg.AssetExecutionContext, experiment: ExperimentResource,
               scorer: ScoringResource) -> dg.MaterializeResult:
    """answer/joint log-likelihoods and gains of every eligible trace, one shard per task."""
    config, store = experiment.config(), experiment.store()
    _, reason = scoring_instrument(_gate(store), config)  # a ParityError here: the fast instrument may not score
    context.log.info(f"scoring instrument: {reason}")
    catalog = store.get_parquet(TASK_CATALOG).filter(pl.col("task_id").is_in(context.partition_keys))
    share = workers.share("score_bank", score_worker, experiment, scorer, {"batch_size": scorer.batch_size})
    keyer = Keyer(store, config, SCORE_BANK)
    return fill_shards(context, store, SCORE_BANK, catalog, _maker(experiment, scorer), share, keyer)


def _maker(experiment: ExperimentResource, scorer: ScoringResource) -> Callable[[dict, str], tuple]:
    """make(task row, shard file) -> (digest, action, figures): score the task's eligible traces."""
    config, store = experiment.config(), experiment.store()
    instrument, _ = scoring_instrument(_gate(store), config)  # the one the rule chose, never a failed fast one

    def make(task: dict, name: str) -> tuple[str, str, dict]:
        traces = store.get_parquet(shard_file(TRACE_BANK, task["task_id"])).filter("eligible")
        shard = score_task(scorer.instrument(instrument), task["prompt"], task["answer"], traces)
        figures = {"traces_scored": shard.height, "instrument": instrument,
                   "mean_answer_gain": float(shard["answer_gain"].mean() or 0.0),
                   "mean_joint_gain": float(shard["joint_gain"].mean() or 0.0)}
        return store.put_parquet(name, shard), "scored", figures
    return make


def _gate(store) -> dict | None:
    """The parity gate's receipt, or None before the gate has run."""
    return store.get_json(PARITY_GATE) if store.exists(PARITY_GATE) else None


def score_worker(experiment: ExperimentResource, batch_size: int) -> Callable[[str], dict]:
    """The second core's share of scoring (workers/local.py): one task's shard by id."""
    scorer = ScoringResource(experiment=experiment, batch_size=batch_size)
    store = experiment.store()
    return shard_work(store, SCORE_BANK, _maker(experiment, scorer), Keyer(store, experiment.config(), SCORE_BANK))


SCORE_CHECKS = {
    "every_eligible_scored_once": "each eligible trace has exactly one score row",
    "no_ineligible_scored": "no ineligible or unknown trace is scored",
    "finite_values": "every likelihood and gain is finite",
    "hash_parity": "every score shard's SHA-256 equals its receipt",
}


@dg.asset(deps=[score_bank], group_name="score", kinds={"polars", "json"}, owners=OWNERS,
          check_specs=blocking_checks("score_bank_index", SCORE_CHECKS))
def score_bank_index(context: dg.AssetExecutionContext, experiment: ExperimentResource) -> dg.MaterializeResult:
    config, store = experiment.config(), experiment.store()
    task_ids = train_task_ids(config)
    traces, _, _ = load_shards(store, TRACE_BANK, task_ids, TRACE_SCHEMA)
    scores, digests, parity = load_shards(store, SCORE_BANK, task_ids, SCORE_SCHEMA)
    once, extra = join_problems(traces.filter("eligible"), scores, "scored")
    problems = {"hash_parity": parity, "every_eligible_scored_once": once, "no_ineligible_scored": extra}
    problems["finite_values"] = non_finite(scores)
    digest = write_index(store, SCORE_BANK, digests)
    return dg.MaterializeResult(
        metadata={"traces_scored": scores.height, "tasks": scores["task_id"].n_unique(), "index_sha256": digest,
                  "mean_answer_gain": float(scores["answer_gain"].mean() or 0.0),
                  "mean_joint_gain": float(scores["joint_gain"].mean() or 0.0)},
        data_version=dg.DataVersion(digest),
        check_results=[check_result(n, problems[n]) for n in SCORE_CHECKS],
    )
