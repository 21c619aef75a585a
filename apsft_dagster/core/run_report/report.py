"""The run report: Markdown in the shape of the seed's hand-written report, plus its PNG plots.

Everything is derived from the validated run folder and the thresholds, in a fixed order with
fixed number formats, so equal inputs give byte-identical Markdown and PNGs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from apsft_dagster.core.config import HackThresholds
from apsft_dagster.core.run_report import plots, tables
from apsft_dagster.core.run_report.folder import NOT_RECORDED
from apsft_dagster.core.run_report.hacking import hack_rates, matched_pairs
from apsft_dagster.core.run_report.ingest import RunFolder
from apsft_dagster.core.run_report.verdict import verdict

EVAL_PLOT = "eval_curves.png"
HACK_PLOT = "hack_rate.png"
SECTION_WORDS = {"train_reward": "train reward by step", "usage": "usage and cost",
                 "checkpoints": "checkpoint statuses and sizes", "adapters": "adapters and their deployability",
                 "rollouts": "rollout samples (so hacking is not audited)"}
MISSING_RULE = ("The verdict reads a section that is not recorded as unknown, never as a yes or a no: without "
                "rollouts hacking is not audited; a best checkpoint is \"not deployable\" only on a recorded "
                "status, and one whose checkpoint, adapter or deployability is not recorded keeps the run short of "
                "\"production candidate\" (rule `metric_up_deployability_not_recorded`).")


@dataclass(frozen=True)
class RunReport:
    markdown: str
    plots: dict[str, bytes]  # file name (as linked from the Markdown) -> PNG bytes
    verdict: dict  # {rule, verdict, because}


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def _fenced(text: str) -> list[str]:
    """A text code block whose fence is longer than any backtick run inside the text."""
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    return [f"{fence}text", text, fence]


def _header(run: RunFolder) -> list[str]:
    meta, training = run.config.run, run.config.training
    fields = [("Run id", meta.id), ("Run name", meta.name), ("Base model", meta.base_model),
              ("Training platform", meta.platform), ("Environment", meta.environment),
              ("Task set", training.task_set), ("Reward mode", training.reward_mode), ("Steps", training.steps),
              ("Batch size", training.batch_size), ("Rollouts per example", training.rollouts_per_example),
              ("Started", meta.started), ("Completed", meta.completed)]
    if run.source_format != "native":
        fields.append(("Source format", run.source_format))
    return [f"# RL run report: {meta.name}", ""] + [f"{k}: `{v}`  " if v is not None else f"{k}: {NOT_RECORDED}  "
                                                    for k, v in fields if v != ""]


def _source(run: RunFolder) -> list[str]:
    """What the source did not record and how the rules read it, and the importer's choices (omitted for a
    complete native folder)."""
    if run.source_format == "native" and not run.not_recorded:
        return []
    lines = ["## Source", ""]
    if run.source_format != "native":
        lines += [f"Imported from `{run.source_format}` ({run.config.run.platform}).", ""]
    if run.not_recorded:
        lines += ["Not recorded in this run: " + ", ".join(SECTION_WORDS[n] for n in run.not_recorded)
                  + f". Each shows as \"{NOT_RECORDED}\", never as an error or a zero.", "", MISSING_RULE, ""]
    return lines + [line for note in run.notes for line in (note, "")]


def _ids(run: RunFolder, best: dict) -> str:
    def one(value, section):
        return f"`{value}`" if value is not None else (NOT_RECORDED if section is None else "none")
    return f"adapter {one(best['adapter_id'], run.adapters)}, checkpoint {one(best['checkpoint_id'], run.checkpoints)}"


def _evals(run: RunFolder) -> list[str]:
    labels = [m.label for m in run.evals.metrics] + (["train reward mean"] if run.train_reward else [])
    lines = ["## Eval Scores", "", "| Step | " + " | ".join(labels) + " |", "|---:|" + "---:|" * len(labels)]
    for row in tables.eval_table(run):
        cells = [_num(v) for v in row["scores"].values()] + ([_num(row["train_reward"])] if run.train_reward else [])
        lines.append(f"| {row['step']} | " + " | ".join(cells) + " |")
    lines += ["", f"![Eval scores by step]({EVAL_PLOT})", ""]
    for best in tables.best_checkpoints(run):
        where = "none" if best["step"] is None else f"step {best['step']} ({best['value']:.4f}), {_ids(run, best)}"
        lines.append(f"Best {best['label']} checkpoint: {where}; {best['explanation']}.")
        lines.append("")
    return lines


def _cost(run: RunFolder) -> list[str]:
    cost = tables.cost_table(run)
    lines = ["## Cost", ""]
    if cost is None:
        return lines + [f"Usage and cost: {NOT_RECORDED} (the source has no usage record).", ""]
    lines += [f"- {r['kind'].capitalize()} tokens: `{r['tokens']:,}`, cost `${r['cost_usd']:.4f}`"
              for r in cost["rows"]]
    return lines + [f"- Total tokens: `{cost['total_tokens']:,}`", f"- Total cost: `${cost['total_cost_usd']:.4f}`", ""]


def _statuses(run: RunFolder) -> list[str]:
    checkpoints, adapters = tables.checkpoint_status(run), tables.adapter_status(run)
    lines = ["## Checkpoints", ""]
    if checkpoints is None:
        lines += [f"Checkpoints: {NOT_RECORDED} (the source has no checkpoint record)."]
    else:
        lines += ["| Step | Checkpoint id | Status | Size bytes |", "|---:|---|---|---:|"]
        lines += [f"| {c['step']} | {c['id']} | {c['status']} | "
                  f"{'' if c['size_bytes'] is None else c['size_bytes']} |" for c in checkpoints]
    lines += ["", "## Adapters", ""]
    if adapters is None:
        return lines + [f"Adapters: {NOT_RECORDED} (the source has no adapter record).", ""]
    lines += ["| Step | Adapter id | Status | Deployment status | Deployable |", "|---:|---|---|---|---|"]
    lines += [f"| {a['step']} | {a['id']} | {a['status']} | {_said(a['deployment_status'])} | "
              f"{_said(a['deployable'])} |" for a in adapters]
    return lines + [""]


def _said(value) -> str:
    return NOT_RECORDED if value is None else str(value)


def _audit(rates: list[dict]) -> list[str]:
    lines = ["## Reward-Hacking Audit", ""]
    if not rates:
        return lines + ["No rollout samples were saved, so hacking was not audited.", ""]
    lines += ["| Step | Samples | Hacked | Hack rate | Train reward mean | Signals |", "|---:|---:|---:|---:|---:|---|"]
    for r in rates:
        signals = ", ".join(f"{name} {n}" for name, n in r["reasons"].items()) or "none"
        lines.append(f"| {r['step']} | {r['samples']} | {r['hacked']} | {r['rate']:.2%} | {_num(r['train_reward'])} "
                     f"| {signals} |")
    return lines + ["", f"![Hack rate beside train reward]({HACK_PLOT})", ""]


def _signal_words(signals: dict) -> str:
    if not signals["hacked"]:
        return "no hacking signal"
    return "hacking signals: " + ", ".join(signals["reasons"])


def _pairs(pairs: list[dict]) -> list[str]:
    lines = ["## Before / After Samples", ""]
    if not pairs:
        return lines + ["No problem id was saved at both the first rollout step and a later one.", ""]
    lines += [(f"{len(pairs)} problem id(s) of step {pairs[0]['before']['step']} reappear in later saved samples; "
               "each is paired with its latest later sample, the fairest matched pairs available."), ""]
    for n, pair in enumerate(pairs, start=1):
        before, after = pair["before"], pair["after"]
        lines += [f"### Example {n}: problem {pair['problem_id']}", "", "Prompt:", "", *_fenced(pair["prompt"]), ""]
        for name, side in (("Before", before), ("After", after)):
            lines += [f"{name}, step {side['step']} reward {side['reward']:.4f} ({_signal_words(side['signals'])}):",
                      "", *_fenced(side["completion"]), ""]
        moved = "increased" if after["reward"] > before["reward"] else "did not increase"
        worse = " but the after sample shows hacking" if after["signals"]["hacked"] else ""
        lines += [f"Read: reward {moved}{worse}.", ""]
    return lines


def _measured(run: RunFolder) -> list[str]:
    """Files measured, not read (checkpoint weights): their sizes, which a change to the run would touch."""
    if not run.sizes:
        return []
    return ["", "Measured by size, not hashed (checkpoint files):", "", "| File | Bytes |", "|---|---:|",
            *[f"| {k} | {v} |" for k, v in run.sizes.items()]]


def build_report(run: RunFolder, thresholds: HackThresholds | None = None, signals=None) -> RunReport:
    """The Markdown report and its plots for one validated run folder."""
    t = thresholds or HackThresholds()
    rates, decided = hack_rates(run, t, signals), verdict(run, t, signals)  # signals: a SignalSet or None
    verdict_line = f"**{decided['verdict']}** (rule `{decided['rule']}`): {decided['because']}."
    sections = [
        _header(run), ["", "## Verdict", "", verdict_line, ""], _source(run),
        _evals(run), _cost(run), _statuses(run), _audit(rates), _pairs(matched_pairs(run, t, signals)),
        ["## Inputs", "", "| File | SHA-256 |", "|---|---|", *[f"| {k} | {v} |" for k, v in run.sha256.items()]],
        _measured(run),
    ]
    labels = {m.key: m.label for m in run.evals.metrics}
    steps = run.train_reward.steps if run.train_reward else []
    rewards = [(r.step, r.reward_mean) for r in sorted(steps, key=lambda r: r.step)]
    figures = {EVAL_PLOT: plots.eval_curves_plot(tables.eval_table(run), labels),
               HACK_PLOT: plots.hack_rate_plot(rates, rewards)}
    return RunReport(markdown="\n".join(line for section in sections for line in section) + "\n", plots=figures,
                     verdict=decided)
