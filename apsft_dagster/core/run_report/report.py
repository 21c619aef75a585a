"""The run report: Markdown in the shape of the seed's hand-written report, plus its PNG plots.

Everything is derived from the validated run folder and the thresholds, in a fixed order with
fixed number formats, so equal inputs give byte-identical Markdown and PNGs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from apsft_dagster.core.run_report import plots, tables
from apsft_dagster.core.run_report.hacking import hack_rates, matched_pairs
from apsft_dagster.core.run_report.ingest import RunFolder
from apsft_dagster.core.run_report.settings import HackThresholds
from apsft_dagster.core.run_report.verdict import verdict

EVAL_PLOT = "eval_curves.png"
HACK_PLOT = "hack_rate.png"


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
    return [f"# RL run report: {meta.name}", ""] + [f"{k}: `{v}`  " for k, v in fields if v != ""]


def _evals(run: RunFolder) -> list[str]:
    labels = [m.label for m in run.evals.metrics]
    lines = ["## Eval Scores", "", "| Step | " + " | ".join(labels) + " | train reward mean |",
             "|---:|" + "---:|" * (len(labels) + 1)]
    for row in tables.eval_table(run):
        cells = [_num(v) for v in row["scores"].values()] + [_num(row["train_reward"])]
        lines.append(f"| {row['step']} | " + " | ".join(cells) + " |")
    lines += ["", f"![Eval scores by step]({EVAL_PLOT})", ""]
    for best in tables.best_checkpoints(run):
        where = "none" if best["step"] is None else (f"step {best['step']} ({best['value']:.4f}), adapter "
                                                     f"`{best['adapter_id']}`, checkpoint `{best['checkpoint_id']}`")
        lines.append(f"Best {best['label']} checkpoint: {where}; {best['explanation']}.")
        lines.append("")
    return lines


def _cost(run: RunFolder) -> list[str]:
    cost = tables.cost_table(run)
    lines = ["## Cost", ""]
    lines += [f"- {r['kind'].capitalize()} tokens: `{r['tokens']:,}`, cost `${r['cost_usd']:.4f}`"
              for r in cost["rows"]]
    return lines + [f"- Total tokens: `{cost['total_tokens']:,}`", f"- Total cost: `${cost['total_cost_usd']:.4f}`", ""]


def _statuses(run: RunFolder) -> list[str]:
    lines = ["## Checkpoints", "", "| Step | Checkpoint id | Status | Size bytes |", "|---:|---|---|---:|"]
    lines += [f"| {c['step']} | {c['id']} | {c['status']} | {'' if c['size_bytes'] is None else c['size_bytes']} |"
              for c in tables.checkpoint_status(run)]
    lines += ["", "## Adapters", "", "| Step | Adapter id | Status | Deployment status | Deployable |",
              "|---:|---|---|---|---|"]
    lines += [f"| {a['step']} | {a['id']} | {a['status']} | {a['deployment_status']} | {a['deployable']} |"
              for a in tables.adapter_status(run)]
    return lines + [""]


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


def build_report(run: RunFolder, thresholds: HackThresholds | None = None) -> RunReport:
    """The Markdown report and its plots for one validated run folder."""
    t = thresholds or HackThresholds()
    rates, decided = hack_rates(run, t), verdict(run, t)
    verdict_line = f"**{decided['verdict']}** (rule `{decided['rule']}`): {decided['because']}."
    sections = [
        _header(run), ["", "## Verdict", "", verdict_line, ""],
        _evals(run), _cost(run), _statuses(run), _audit(rates), _pairs(matched_pairs(run, t)),
        ["## Inputs", "", "| File | SHA-256 |", "|---|---|", *[f"| {k} | {v} |" for k, v in run.sha256.items()]],
    ]
    labels = {m.key: m.label for m in run.evals.metrics}
    rewards = [(r.step, r.reward_mean) for r in sorted(run.train_reward.steps, key=lambda r: r.step)]
    figures = {EVAL_PLOT: plots.eval_curves_plot(tables.eval_table(run), labels),
               HACK_PLOT: plots.hack_rate_plot(rates, rewards)}
    return RunReport(markdown="\n".join(line for section in sections for line in section) + "\n", plots=figures,
                     verdict=decided)
