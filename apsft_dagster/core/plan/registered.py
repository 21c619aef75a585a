"""The registered run's published figures, once (docs/PROTOCOL.md §10 and §15, "Scale").

`apsft plan` prices a profile from its own counts. Where nothing has run yet and the profile
is the registered protocol (the settings in MEASURED_UNDER), these are its expected figures;
and the registered matrix at the registered envelope is the estimate the registered run stopped
on: 34,446,994 forward tokens, 9.6-18.1 GPU-hours, over its budget.
"""

from __future__ import annotations

TASKS = 360
TRACES = 23_040
THOUGHT_TOKENS = 108_759_239  # sampled thought tokens, the whole bank
ELIGIBLE = 22_681  # natural closes = eligible = scored = rolled out (4 exact loops, 0 top-ups, 0 excluded)
ROWS_PER_ARM = 720
FORWARD_TOKENS = {  # two-epoch forward tokens per arm, as the registered manifest stated them
    "answer_potential": 7_129_440,
    "joint_potential": 7_620_122,
    "potential_shuffle": 7_129_440,
    "random_natural": 6_999_860,
    "shortest_natural": 3_308_702,
    "success_rft": 2_259_430,
}
MATRIX_FORWARD_TOKENS = sum(FORWARD_TOKENS.values())  # 34,446,994
# §10: "estimated at 9.6-18.1 GPU-hours (about 530-1,000 tokens/s)": the stress envelope it stated
ENVELOPE_TOKENS_PER_S = {"low": 530.0, "high": 1000.0}

# What the figures were measured under: a profile that differs in any of these gets none of them.
MEASURED_UNDER = {
    "model.name": "Qwen/Qwen3.5-4B",
    "tasks.train.total": TASKS,
    "harvest.samples_per_task": 64,
    "harvest.allowance": 12_288,
    "harvest.continuation": 2_048,
    "harvest.record_limit": 16_000,
    "training.max_length": 16_000,
    "training.epochs": 2,
}


def applies(config) -> bool:
    """Whether the profile runs under the registered run's settings (its figures then apply)."""
    def value(dotted: str):
        node = config
        for key in dotted.split("."):
            node = getattr(node, key)
        return node

    return all(value(k) == v for k, v in MEASURED_UNDER.items())


def mean_thought_tokens() -> float:
    """Thought tokens per trace in the registered bank (prompt and answer not included)."""
    return THOUGHT_TOKENS / TRACES


def matrix_hours(tokens: int | None = None, envelope: dict | None = None) -> tuple[float, float]:
    """(low, high) device-hours of `tokens` training forward tokens (default: the registered
    matrix's) at an envelope of tokens/s (default: the registered one)."""
    tokens = MATRIX_FORWARD_TOKENS if tokens is None else tokens
    envelope = ENVELOPE_TOKENS_PER_S if envelope is None else envelope
    return tokens / envelope["high"] / 3600, tokens / envelope["low"] / 3600
