"""The work of each stage on the Stage A path, from the profile's counts and what the store holds.

Each stage is a list of priced parts: tokens (or merges, or pretraining steps) at most, from the
allowances and the split and arm tables, and expected, from the trace bank's lengths where a
store or an inherited bank holds them (the tasks not yet held at the mean of those that are), or
from the registered run's figures for the registered protocol. A stage's `counts` says whether
its counts came from the store or from the profile's registered counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from apsft_dagster.core.embedded.cache import model_at_hand
from apsft_dagster.core.plan import registered
from apsft_dagster.core.plan.observed import Observed
from apsft_dagster.core.policies import parse_policy, stage_a_eval_keys, stage_a_policies
from apsft_dagster.core.selection.arms import ARMS, the_arm
from apsft_dagster.core.selection.rules import ROWS_PER_TASK
from apsft_dagster.core.splits import SPLIT, STAGE_A_SPLITS
from apsft_dagster.core.task_file.source import train_task_ids

REGISTERED_COUNTS = "registered counts"
INSTRUMENTS = 2  # the parity gate scores each calibration trace with both instruments
RECORDS_PER_TRACE = 2  # a scored trace and its task's empty-thought baseline


@dataclass(frozen=True)
class Part:
    """`upper` units at most and `expected` units (None: unknown), priced at the rate named `rate`;
    the tokens they stand for (a merge stands for none, a pretraining step for a batch)."""

    rate: str
    upper: float
    expected: float | None
    tokens_upper: int
    tokens_expected: int | None
    label: str = ""


def tokens(rate: str, upper: int, expected: float | None, label: str = "") -> Part:
    exp = None if expected is None else round(expected)
    return Part(rate, upper, exp, upper, exp, label)


def units(rate: str, n: int, tokens_each: int = 0, label: str = "") -> Part:
    """`n` merges or steps: known exactly, so expected = upper."""
    return Part(rate, n, n, n * tokens_each, n * tokens_each, label)


@dataclass
class Stage:
    key: str
    name: str
    work: str
    counts: str
    parts: list[Part]
    expected_from: str | None = None
    done: float | None = None  # share of the stage's work the store already holds
    conditional: bool = False  # Stage B: runs only if Stage A triggers
    notes: list[str] = field(default_factory=list)
    # its independent partitions by relative size (one: a single worker runs it), what one is, and the model
    # loads its wall time adds (core/plan/wall.py): "worker" loads once, "partition" each (its own model)
    partitions: list[float] = field(default_factory=lambda: [1.0])
    partition: str = ""
    loads: str | None = None  # None: no engine to load (the embedded build)


def split_size(config, name: str) -> int:
    """Tasks in a split of the split table; a derived split has its source split's."""
    return getattr(config.tasks, SPLIT[name].derived_from or name).total


def projected(per_task: list[float], total: int) -> float | None:
    """The sum over the tasks known, plus their mean for each task not known yet."""
    return None if not per_task else sum(per_task) * total / len(per_task)


def per_task(bank: pl.DataFrame, max_length: int) -> pl.DataFrame:
    """Per task: generated tokens, eligible traces and their records (capped at the training
    length too), and the empty baseline's record (x + b + y*: a record less its thought)."""
    eligible = pl.col("eligible")
    return bank.group_by("task_id", "origin").agg(
        generated=pl.col("n_tokens").sum(), eligible=eligible.sum(),
        records=pl.col("n_record_tokens").filter(eligible).sum(),
        capped=pl.col("n_record_tokens").filter(eligible).clip(upper_bound=max_length).sum(),
        shortest=pl.col("n_record_tokens").filter(eligible).sort_by(pl.col("n_thought_tokens").filter(eligible))
        .head(ROWS_PER_TASK).clip(upper_bound=max_length).sum(),
        empty=(pl.col("n_record_tokens") - pl.col("n_thought_tokens")).min()).sort("task_id")


def _origins(frame: pl.DataFrame) -> str:
    return " + ".join(sorted(set(frame["origin"].to_list())))


def _held(done: int, total: int) -> str:
    return f"store {done:,}/{total:,} tasks"


def model_build(config, seen: Observed) -> Stage:
    cfg = config.embedded
    capability = cfg.capability_tasks * (cfg.capability_samples + 1) * cfg.capability_allowance
    parts = [units("pretrain_step", cfg.train_steps, cfg.batch_size * cfg.max_positions, "steps"),
             tokens("generation", capability, None, "capability")]
    work = (f"{cfg.train_steps:,} pretraining steps x batch {cfg.batch_size} (<= {cfg.max_positions:,} tokens each); "
            f"capability check {cfg.capability_tasks} tasks x {cfg.capability_samples + 1} x "
            f"<= {cfg.capability_allowance}")
    at_hand = "store" if seen.base_model else model_at_hand(config)  # a copy, not a build
    copied = {"cache": "the cached model", "shipped": "the shipped model"}.get(at_hand)
    notes = [f"no build: {copied}, copied and verified"] if copied else []
    return Stage("model_build", "embedded model build", work, at_hand or REGISTERED_COUNTS, parts,
                 done=1.0 if at_hand else 0.0, notes=notes)


def harvest(config, seen: Observed) -> Stage:
    h, tasks = config.harvest, train_task_ids(config)
    todo = [t for t in tasks if t not in seen.inherited]
    samples = h.samples_per_task + h.topup_batches * h.topup_size
    upper = len(todo) * samples * (h.allowance + h.continuation)
    held = per_task(seen.bank.filter(pl.col("origin") == "store"), config.training.max_length)
    expected, source = projected(held["generated"].to_list(), len(todo)), "store"
    if expected is None and seen.inherited:
        known = per_task(seen.bank, config.training.max_length)
        expected, source = projected(known["generated"].to_list(), len(todo)), "inherited bank"
    if expected is None and registered.applies(config):
        closes = registered.ELIGIBLE  # each natural close generates its `</think>` too
        expected, source = (registered.THOUGHT_TOKENS + closes) * len(todo) / registered.TASKS, "registered run"
    work = (f"{len(todo):,} tasks x {h.samples_per_task} samples (+ up to {h.topup_batches} x {h.topup_size} top-ups), "
            f"<= {h.allowance:,} + {h.continuation:,} new tokens each")
    if seen.inherited:
        work += f"; {len(seen.inherited):,} tasks inherited, imported as they are"
    counts = _held(held.height, len(todo)) if held.height else REGISTERED_COUNTS
    return Stage("harvest", "harvest (trace bank)", work, counts, [tokens("generation", upper, expected)],
                 None if expected is None else source, done=held.height / len(todo) if todo else 1.0,
                 partitions=[1.0] * len(todo), partition="task", loads="worker")


def _bank_figures(config, seen: Observed) -> tuple[pl.DataFrame, int]:
    """Per-task figures of every task the store or the inherited bank holds, and all train tasks."""
    return per_task(seen.bank, config.training.max_length), config.tasks.train.total


def _traces_upper(config) -> int:
    h = config.harvest
    return config.tasks.train.total * (h.samples_per_task + h.topup_batches * h.topup_size)


def parity_gate(config, seen: Observed) -> Stage:
    n, limit = config.scoring.calibration_traces, config.harvest.record_limit
    records = n * INSTRUMENTS * RECORDS_PER_TRACE
    known, _ = _bank_figures(config, seen)
    expected, source = None, None
    if known.height and known["eligible"].sum():
        per_trace = known["records"].sum() / known["eligible"].sum() + known["empty"].mean()
        expected, source = n * INSTRUMENTS * per_trace, _origins(known)
    elif registered.applies(config):
        expected, source = n * INSTRUMENTS * registered.mean_thought_tokens(), "registered run (thought tokens)"
    work = f"{n} calibration traces x {INSTRUMENTS} instruments, each with its empty baseline"
    return Stage("parity_gate", "parity gate", work, "store" if known.height else REGISTERED_COUNTS,
                 [tokens("scoring", records * limit, expected)], source, done=1.0 if seen.parity else 0.0,
                 partitions=[1.0] * INSTRUMENTS, partition="instrument", loads="partition")


def scoring(config, seen: Observed) -> Stage:
    known, total = _bank_figures(config, seen)
    upper = (_traces_upper(config) + total) * config.harvest.record_limit
    eligible = projected(known["eligible"].to_list(), total)
    expected = projected((known["records"] + known["empty"]).to_list(), total)
    source = _origins(known) if known.height else None
    if expected is None and registered.applies(config):
        eligible = registered.ELIGIBLE
        expected, source = eligible * registered.mean_thought_tokens(), "registered run (thought tokens)"
    count = f"{eligible:,.0f} eligible traces" if eligible is not None else f"<= {_traces_upper(config):,} traces"
    work = f"{count} + {total:,} empty baselines, one teacher-forced pass each ({config.scoring.instrument})"
    return Stage("scoring", "scoring (score bank)", work, _held(known.height, total) if known.height else
                 REGISTERED_COUNTS, [tokens("scoring", upper, expected)], source, done=len(seen.scored) / total,
                 partitions=[1.0] * total, partition="task", loads="worker")


def r1_rollouts(config, seen: Observed) -> Stage:
    known, total = _bank_figures(config, seen)
    traces, new = _traces_upper(config), config.rollouts.max_new_tokens
    eligible = projected(known["eligible"].to_list(), total)
    prefill, source = projected(known["records"].to_list(), total), _origins(known) if known.height else None
    if prefill is None and registered.applies(config):
        eligible, source = registered.ELIGIBLE, "registered run (thought tokens)"
        prefill = eligible * registered.mean_thought_tokens()
    parts = [tokens("scoring", traces * config.harvest.record_limit, prefill, "prefill"),
             tokens("generation", traces * new, None if eligible is None else eligible * new, "new")]
    count = f"{eligible:,.0f}" if eligible is not None else f"<= {traces:,}"
    work = f"{count} rollouts: prefill of x + z + b, then <= {new} new tokens"
    stage = Stage("r1_rollouts", "R1 rollouts", work, _held(known.height, total) if known.height else
                  REGISTERED_COUNTS, parts, source, done=len(seen.rolled_out) / total,
                  partitions=[1.0] * total, partition="task", loads="worker")
    stage.notes.append("new tokens expected at rollouts.max_new_tokens each (an answer line stops sooner)")
    return stage


def arm_tokens(config, seen: Observed) -> tuple[dict[str, float] | None, str | None]:
    """Two-epoch forward tokens per arm, expected: the manifest's, else from the bank's records
    (shortest_natural its two shortest per task, the others at the mean eligible record), else
    the registered run's."""
    if seen.manifest is not None:
        return {e["arm"]: e["forward_tokens"] for e in seen.manifest["arms"]}, "store (sft_manifest)"
    known, total = _bank_figures(config, seen)
    epochs, rows = config.training.epochs, ROWS_PER_TASK * total
    if known.height and known["eligible"].sum():
        mean = known["capped"].sum() / known["eligible"].sum()
        shortest = the_arm(rows="shortest")
        return {a: epochs * (projected(known["shortest"].to_list(), total) if a == shortest else rows * mean)
                for a in ARMS}, _origins(known) + " (record lengths)"
    if registered.applies(config):
        return dict(registered.FORWARD_TOKENS), "registered run"
    return None, None


def training(config, seen: Observed) -> Stage:
    t, policies = config.training, stage_a_policies(config)
    rows = ROWS_PER_TASK * config.tasks.train.total
    upper = len(policies) * rows * min(t.max_length, config.harvest.record_limit) * t.epochs
    by_arm, source = arm_tokens(config, seen)
    expected = None if by_arm is None else sum(by_arm.values())
    work = (f"{len(policies)} Stage A policies x {rows:,} rows x {t.epochs} epochs, "
            f"records <= {min(t.max_length, config.harvest.record_limit):,} tokens")
    counts = "store (sft_manifest)" if seen.manifest else REGISTERED_COUNTS
    return Stage("training", f"training ({len(policies)} Stage A policies)", work, counts,
                 [tokens("training", upper, expected)], source, done=len(seen.adapters & set(policies)) / len(policies),
                 partitions=policy_shares(policies, by_arm), partition="policy", loads="worker")


def policy_shares(policies: list[str], by_arm: dict[str, float] | None) -> list[float]:
    """Each policy's adapter by its arm's expected forward tokens; even where none are known."""
    return [1.0] * len(policies) if by_arm is None else [by_arm[parse_policy(p)[0]] for p in policies]


def merge_and_probe(config, policies: list[str], seen: Observed, key: str, name: str,
                    conditional: bool = False) -> Stage:
    p = config.probe
    probe = (len(policies) + 1) * p.prompts * p.max_new_tokens  # base's greedy outputs once per run
    parts = [units("merge", len(policies), label="merges"), tokens("generation", probe, probe, "probe")]
    work = (f"{len(policies)} merges; probe {p.prompts} prompts x <= {p.max_new_tokens} new tokens x "
            f"{len(policies) + 1} models (base once)")
    return Stage(key, name, work, REGISTERED_COUNTS, parts,
                 done=len(seen.merged & set(policies)) / len(policies) if policies else 1.0, conditional=conditional,
                 partitions=[1.0] * len(policies), partition="policy", loads="partition")


def stage_a_evaluation(config, seen: Observed) -> Stage:
    policies, allowance = stage_a_eval_keys(config), config.evaluation.allowance
    sizes = {s: split_size(config, s) for s in STAGE_A_SPLITS}
    n = sum(sizes.values())
    done = [seen.generations[p] for p in policies if p in seen.generations]
    expected = projected(done, len(policies))
    splits = ", ".join(f"{s} {k}" for s, k in sizes.items())
    work = f"{len(policies)} policies (base + {len(policies) - 1}) x {n} tasks ({splits}), greedy, <= {allowance:,}"
    return Stage("stage_a_evaluation", "Stage A evaluation", work, f"store {len(done)}/{len(policies)} policies"
                 if done else REGISTERED_COUNTS, [tokens("generation", len(policies) * n * allowance, expected)],
                 "store" if done else None, done=len(done) / len(policies),
                 partitions=[1.0] * len(policies), partition="policy", loads="partition")
