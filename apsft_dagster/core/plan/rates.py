"""What each stage is priced at: the profile's envelopes, or a GPU rehearsal's measurements.

A rate is units per second, low and high (tokens; or merges and pretraining steps, from their
seconds each). The profile's: `plan.*` and `training.throughput_tokens_per_s`. A rehearsal
(`scripts/gpu_rehearsal.py`'s JSON, format `apsft-gpu-rehearsal/1`) replaces each figure it
measured with that one figure: generation by the profile's `harvest.backend` (vLLM where it was
measured, else Transformers, saying so), scoring by `scoring.instrument`, training and merge as
measured (and the embedded build's step, where a CPU rehearsal of an embedded profile timed it:
benchmarks/bench_plan.py). Keys the format does not name are ignored, so a later rehearsal may add figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from apsft_dagster.core.config import Envelope
from apsft_dagster.core.errors import PlanError
from apsft_dagster.core.json_input import parse_json
from apsft_dagster.core.plan_settings import plan_settings

REHEARSAL_FORMAT = "apsft-gpu-rehearsal/1"
REQUIRED = ("training.tokens_per_s", "merge.seconds", "transformers_generation.tokens_per_s", "vllm.measured")
REQUIRED_WHEN_VLLM = ("vllm.generation.tokens_per_s", "vllm.prompt_logprobs.tokens_per_s")


@dataclass(frozen=True)
class Rate:
    """Units a second (tokens, merges or steps), low and high; how it reads; where it came from."""

    low: float
    high: float
    text: str
    source: str


def _range(low: float, high: float, digits: int = 0) -> str:
    return f"{low:,.{digits}f}" if low == high else f"{low:,.{digits}f}-{high:,.{digits}f}"


def tokens_rate(low: float, high: float, source: str) -> Rate:
    return Rate(low, high, f"{_range(low, high)} tok/s", source)


def seconds_rate(low: float, high: float, unit: str, source: str) -> Rate:
    """`low`-`high` seconds per unit, as units a second (the slow end is the low rate)."""
    digits = 0 if min(low, high) >= 10 else 2
    return Rate(1 / high, 1 / low, f"{_range(low, high, digits)} s a {unit}", source)


def _from(envelope: Envelope, source: str) -> Rate:
    return tokens_rate(envelope.low, envelope.high, source)


def profile_rates(config) -> dict[str, Rate]:
    """The profile's own envelopes, by the stage kind they price."""
    plan = plan_settings(config)
    rates = {
        "generation": _from(plan.generation_tokens_per_s, "profile plan.generation_tokens_per_s"),
        "scoring": _from(plan.scoring_tokens_per_s, "profile plan.scoring_tokens_per_s"),
        "training": _from(config.training.throughput_tokens_per_s, "profile training.throughput_tokens_per_s"),
        "merge": seconds_rate(plan.merge_seconds.low, plan.merge_seconds.high, "merge", "profile plan.merge_seconds"),
    }
    if plan.pretrain_step_seconds is not None:
        step = plan.pretrain_step_seconds
        rates["pretrain_step"] = seconds_rate(step.low, step.high, "step", "profile plan.pretrain_step_seconds")
    return rates


def _field(doc: dict, dotted: str, where: str):
    node = doc
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            raise PlanError(f"{where}: field {dotted!r} is missing; scripts/gpu_rehearsal.py writes it "
                            f"(format {REHEARSAL_FORMAT}): rerun the rehearsal, or pass the file it wrote")
        node = node[key]
    return node


def _figure(doc: dict, dotted: str, where: str) -> float:
    value = _field(doc, dotted, where)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise PlanError(f"{where}: field {dotted!r} is {value!r}, not a measured figure above 0")
    return float(value)


def read_rehearsal(path: str | Path) -> dict:
    """The rehearsal's figures, each checked: {training, merge_seconds, transformers_generation,
    scoring: {length: tokens/s}, vllm: None or {generation, prompt_logprobs}, vllm_reason, label}.
    PlanError naming the file and the field otherwise."""
    where = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise PlanError(f"{where}: cannot read the rehearsal file ({exc.strerror or exc})") from None
    doc = parse_json(data, where, PlanError)
    if not isinstance(doc, dict):
        raise PlanError(f"{where}: not a rehearsal document (the top level must be an object)")
    if doc.get("format") != REHEARSAL_FORMAT:
        raise PlanError(f"{where}: field 'format' is {doc.get('format')!r}, expected {REHEARSAL_FORMAT!r} "
                        "(scripts/gpu_rehearsal.py writes it)")
    scoring = _field(doc, "scoring", where)
    if not isinstance(scoring, dict) or not scoring:
        raise PlanError(f"{where}: field 'scoring' holds no measured record length (e.g. scoring.16000.tokens_per_s)")
    measured = {"training": _figure(doc, REQUIRED[0], where), "merge_seconds": _figure(doc, REQUIRED[1], where),
                "transformers_generation": _figure(doc, REQUIRED[2], where),
                "scoring": {length: _figure(doc, f"scoring.{length}.tokens_per_s", where) for length in scoring}}
    vllm = _field(doc, REQUIRED[3], where)
    if not isinstance(vllm, bool):
        raise PlanError(f"{where}: field 'vllm.measured' is {vllm!r}, expected true or false")
    measured["vllm"] = ({"generation": _figure(doc, REQUIRED_WHEN_VLLM[0], where),
                         "prompt_logprobs": _figure(doc, REQUIRED_WHEN_VLLM[1], where)} if vllm else None)
    measured["vllm_reason"] = str(doc["vllm"].get("reason", "no reason given"))
    # optional: a CPU rehearsal of an embedded profile (benchmarks/bench_plan.py) times its build's steps
    measured["pretrain_step"] = _figure(doc, "pretrain_step.seconds", where) if "pretrain_step" in doc else None
    device = doc.get("device") if isinstance(doc.get("device"), str) else "an unnamed device"
    measured["label"] = f"rehearsal {Path(path).name} on {device}" + (
        " (--tiny: CPU at tiny dimensions, not the registered model)" if doc.get("tiny") is True else "")
    return measured


def rehearsal_rates(config, measured: dict) -> dict[str, Rate]:
    """The profile's rates with every figure the rehearsal measured put in their place."""
    rates, label = profile_rates(config), measured["label"]
    vllm = measured["vllm"]
    if config.harvest.backend == "vllm" and vllm is not None:
        rates["generation"] = tokens_rate(vllm["generation"], vllm["generation"], f"{label}: vllm.generation")
    else:
        why = f" (harvest.backend vllm, but vLLM was not measured: {measured['vllm_reason']})" \
            if config.harvest.backend == "vllm" else ""
        value = measured["transformers_generation"]
        rates["generation"] = tokens_rate(value, value, f"{label}: transformers_generation{why}")
    if config.scoring.instrument == "fast" and config.harvest.backend == "vllm" and vllm is not None:
        value = vllm["prompt_logprobs"]
        rates["scoring"] = tokens_rate(value, value, f"{label}: vllm.prompt_logprobs (the fast instrument)")
    else:
        lengths = measured["scoring"]
        rates["scoring"] = tokens_rate(min(lengths.values()), max(lengths.values()),
                                       f"{label}: reference scoring on {', '.join(sorted(lengths, key=_length))}"
                                       "-token records")
    rates["training"] = tokens_rate(measured["training"], measured["training"], f"{label}: training.tokens_per_s")
    seconds = measured["merge_seconds"]
    rates["merge"] = seconds_rate(seconds, seconds, "merge", f"{label}: merge.seconds")
    if measured["pretrain_step"] is not None:
        step = measured["pretrain_step"]
        rates["pretrain_step"] = seconds_rate(step, step, "step", f"{label}: pretrain_step.seconds")
    return rates


def _length(key: str) -> tuple[int, str]:
    return (int(key), key) if key.isdigit() else (math.inf, key)
