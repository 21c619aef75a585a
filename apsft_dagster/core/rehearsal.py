"""A declared rehearsal: a registered profile's Stage A read with changed trigger thresholds, so
that Stage B runs where the registered thresholds stop it (issue 37).

`rehearsal: <profile>` names the registered profile a profile rehearses (a name under configs/ or
a path relative to the file, as `extends` takes). The rehearsal may differ from it only in the
Stage A trigger thresholds (`TRIGGER_FIELDS`, at least one) and in the unsealed sections;
`load_config` refuses anything else, naming each field (core/config/sections/rehearsal.py).

Its Stage A is the registered profile's: the base model report, the evidence seal, the SFT
manifest and the adapters bind the registered profile's name and digest (`Config.sealed_profile`,
`Config.sealed_digest`), so a rehearsal on a store where Stage A already ran keeps every byte of
it, and a fresh one writes the same bytes. What reads the thresholds is the rehearsal's: the Stage
A decision (beside the registered thresholds' verdict), Stage B, the final verdict and the report,
each labelled `LABEL` wherever a verdict appears. The profile's own digest (`Config.digest`, which
binds the `rehearsal` key and the changed thresholds) differs from the registered one, so nothing
in it can pass for the registered run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apsft_dagster.core.config.sections.rehearsal import changed

if TYPE_CHECKING:
    from apsft_dagster.core.config import Config

LABEL = "rehearsal (trigger thresholds changed)"


def entry(config: Config, registered_verdict: str) -> dict:
    """What the Stage A decision records of a rehearsal, with the registered thresholds' verdict."""
    return {"label": LABEL, "profile": config.profile, "config_digest": config.digest,
            "registered_profile": config.sealed_profile, "registered_digest": config.sealed_digest,
            "changed": changed(config, config.registered), "registered_verdict": registered_verdict}


def changes_text(changes: dict, sep: str = ", ", tick: str = "") -> str:
    """`changed`'s record in words: `stage_b.min_gain 0 (registered 0.03), ...` (`tick`: "`" in Markdown)."""
    return sep.join(f"{tick}{k}{tick} {v['rehearsal']:g} (registered {v['registered']:g})" for k, v in changes.items())


def declared(config: Config) -> str:
    """What a rehearsal profile is, in one line (`apsft run` and `apsft validate` print it)."""
    return (f"a {LABEL} of {config.sealed_profile}: Stage A is {config.sealed_profile}'s (sealed as config "
            f"{config.sealed_digest[:12]}); changed: {changes_text(changed(config, config.registered))}")


def labelled(verdict: str, document: dict) -> str:
    """A verdict as shown: with the rehearsal's label when `document` records one."""
    return f"{verdict} [{LABEL}]" if document.get("rehearsal") else verdict
