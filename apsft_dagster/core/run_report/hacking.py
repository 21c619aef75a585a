"""The reward-hacking audit over a run's saved rollouts: hack rate per step, matched before/after pairs.

Matched pairs follow the seed's "fairest pairs available": the baseline is the earliest saved
step; every problem id it shares with a later saved step is paired with that id's latest later
occurrence (the most-trained answer to the same prompt). Within a step, the first listed sample
of a problem id stands for it.
"""

from __future__ import annotations

from collections import Counter

from apsft_dagster.core.config import HackThresholds
from apsft_dagster.core.run_report import schema
from apsft_dagster.core.run_report.ingest import RunFolder
from apsft_dagster.core.run_report.signal_registry import CHAT, SignalSet


def hack_rates(run: RunFolder, thresholds: HackThresholds | None = None,
               signals: SignalSet | None = None) -> list[dict]:
    """Per saved rollout step: {step, samples, hacked, rate, reasons: {signal: count}, train_reward | None}
    over the given signals (default: the seven chat signals); no train reward recorded: None per step."""
    t, chosen = thresholds or HackThresholds(), signals or CHAT
    rewards = {} if run.train_reward is None else {r.step: r.reward_mean for r in run.train_reward.steps}
    rows = []
    for step, doc in run.rollouts.items():
        signals = [chosen.summary(s, t) for s in doc.samples]
        hacked = sum(s["hacked"] for s in signals)
        reasons = Counter(r for s in signals for r in s["reasons"])
        rows.append({"step": step, "samples": len(signals), "hacked": hacked, "rate": hacked / len(signals),
                     "reasons": dict(sorted(reasons.items())), "train_reward": rewards.get(step)})
    return rows


def _first_by_problem(doc: schema.Rollouts) -> dict[int, schema.Sample]:
    first: dict[int, schema.Sample] = {}
    for sample in doc.samples:
        first.setdefault(sample.problem_id, sample)
    return first


def _side(step: int, sample: schema.Sample, t: HackThresholds, signals: SignalSet) -> dict:
    return {"step": step, "reward": sample.reward, "completion": sample.completion,
            "signals": signals.summary(sample, t)}


def matched_pairs(run: RunFolder, thresholds: HackThresholds | None = None,
                  signals: SignalSet | None = None) -> list[dict]:
    """Before/after pairs by problem id: [{problem_id, prompt, before: side, after: side}], by problem id.

    A side is {step, reward, completion, signals (SignalSet.summary)}. Empty when fewer than two steps were saved.
    """
    t, chosen = thresholds or HackThresholds(), signals or CHAT
    if len(run.rollouts) < 2:
        return []
    steps = list(run.rollouts)
    baseline = _first_by_problem(run.rollouts[steps[0]])
    latest: dict[int, tuple[int, schema.Sample]] = {}
    for step in steps[1:]:
        for problem, sample in _first_by_problem(run.rollouts[step]).items():
            if problem in baseline:
                latest[problem] = (step, sample)
    return [{"problem_id": problem, "prompt": baseline[problem].prompt,
             "before": _side(steps[0], baseline[problem], t, chosen), "after": _side(step, sample, t, chosen)}
            for problem, (step, sample) in sorted(latest.items())]
