"""The `rehearsal` key: the registered profile a profile rehearses, and what a rehearsal may change (checked on
load: `bind`). What a rehearsal means for Stage A, Stage B and the report: core/rehearsal.py.

`rehearsal: <profile>` names the registered profile a profile rehearses (a name under configs/ or
a path relative to the file, as `extends` takes). The rehearsal may differ from it only in the
Stage A trigger thresholds (`TRIGGER_FIELDS`, at least one) and in the unsealed sections;
`load_config` refuses anything else, naming each field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apsft_dagster.core.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from apsft_dagster.core.config.schema import Config

TRIGGER_FIELDS = ("min_gain", "min_lower_bound", "max_parse_rate_loss", "max_family_macro_loss")
_OWN = ("profile", "rehearsal")  # what names the rehearsal itself, not the experiment


def bind(config: Config, registered: Config, source: Path, unsealed: tuple[str, ...]) -> None:
    """Check that `config` rehearses `registered` and changes nothing else but the sections in
    `unsealed` (config.UNSEALED_SECTIONS); then bind it."""
    differ = [f for f, (a, b) in _pairs(_fixed(config, unsealed), _fixed(registered, unsealed)).items() if a != b]
    if differ:
        raise ConfigError(f"{source}: rehearsal: a rehearsal of {registered.profile} may change only the Stage A "
                          f"trigger thresholds ({', '.join('stage_b.' + f for f in TRIGGER_FIELDS)}); these differ "
                          f"from {registered.profile}: {', '.join(differ)}. Set them back to {registered.profile}'s "
                          "values, or make it a profile of its own (drop `rehearsal`)")
    if not changed(config, registered):
        raise ConfigError(f"{source}: rehearsal: no trigger threshold differs from {registered.profile}'s; a "
                          "rehearsal changes at least one of " + ", ".join("stage_b." + f for f in TRIGGER_FIELDS)
                          + " (or drop the `rehearsal` key)")
    config._registered = registered


def changed(config: Config, registered: Config) -> dict[str, dict[str, float]]:
    """Each trigger threshold the rehearsal changes: its rehearsal value and its registered one."""
    return {f"stage_b.{f}": {"rehearsal": getattr(config.stage_b, f), "registered": getattr(registered.stage_b, f)}
            for f in TRIGGER_FIELDS if getattr(config.stage_b, f) != getattr(registered.stage_b, f)}


def _fixed(config: Config, unsealed: tuple[str, ...]) -> dict:
    """The sealed fields a rehearsal must keep: all but its own name and the trigger thresholds."""
    dump = config.model_dump(mode="json", exclude={*unsealed, *_OWN})
    dump["stage_b"] = {k: v for k, v in dump["stage_b"].items() if k not in TRIGGER_FIELDS}
    return dump


def _pairs(a, b, prefix: str = "") -> dict[str, tuple]:
    """Dotted field -> (a's value, b's value), down every mapping."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return {prefix: (a, b)}
    out = {}
    for key in sorted(set(a) | set(b)):
        out |= _pairs(a.get(key), b.get(key), f"{prefix}.{key}" if prefix else key)
    return out
