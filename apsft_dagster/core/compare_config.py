"""The config a finished store was run under, as dotted fields, and the fields two stores differ in (`apsft compare`).

A store seals its config's digest (`evidence_seal.json`, docs/PROTOCOL.md §8) and keeps the body behind it
beside the seal (`evidence_seal_config.json`, read when its digest is the sealed one); a store sealed before
that file existed gives the fields from the first of these that it vouches for:

1. its design anchor (`apsft freeze`), which keeps the canonical body, when the anchor's digest is the sealed one;
2. the profile it records (`store.json`, the seal's `profile`) as `configs/<profile>.yaml` reads now, when that
   file's digest is the sealed one (the digest names the body, so an equal digest is the same config);
3. the bank keys the seal lists (core/bank_keys.py): only the fields that fed the banks (model, compute,
   embedded, harvest, scoring, rollouts, the experiment seed), named as partial.

Bodies are flattened as the anchor and the bank keys flatten them (`bank_keys.flat`), with each late field
(`LATE_FIELDS`, dropped from the digest while it holds its default) put back at its default, so a body and a
bank key name one value alike.
"""

from __future__ import annotations

from apsft_dagster.core.anchor import read_anchor
from apsft_dagster.core.bank_keys import BANKS, flat
from apsft_dagster.core.config import LATE_FIELDS, body_digest, canonical_json, load_config
from apsft_dagster.core.errors import ConfigError
from apsft_dagster.core.layout import SEALED_CONFIG
from apsft_dagster.core.store import Store

ABSENT = "(absent)"


def _filled(body: dict) -> dict[str, object]:
    fields = flat(body)
    return {**{k: v for k, v in LATE_FIELDS.items() if k not in fields}, **fields}


def _from_profile(profile: str, digest: str) -> dict | None:
    """The profile file's body when its digest is the sealed one (a changed or missing file: None)."""
    try:
        config = load_config(profile, require_snapshot=False)
    except ConfigError:
        return None
    return config.registered.digest_body if config.sealed_digest == digest else None


def _from_bank_keys(seal: dict) -> dict[str, object] | None:
    """The fields of the last bank's key (it is fed by every earlier bank's sections); None for an inherited
    bank, whose key names the index it came from, or when the bank was made under several settings."""
    for bank in reversed(BANKS):
        made = seal.get("keys", {}).get(bank, {}).get("settings", [])
        if len(made) == 1 and "fields" in made[0]["settings"]:
            return dict(made[0]["settings"]["fields"])
    return None


def recorded_config(store: Store, seal: dict) -> dict:
    """{"digest", "profile", "source", "complete", "fields"} of the config the store's evidence was sealed under."""
    digest, profile = seal["config_digest"], seal["profile"]
    if store.exists(SEALED_CONFIG):
        body = store.get_json(SEALED_CONFIG)
        if body_digest(body) == digest:
            return {"digest": digest, "profile": profile, "complete": True, "fields": _filled(body),
                    "source": f"{SEALED_CONFIG} (the body of the sealed digest)"}
    anchor = read_anchor(store)
    if anchor is not None and anchor["config_digest"] == digest:
        return {"digest": digest, "profile": profile, "source": "its design anchor", "complete": True,
                "fields": _filled(anchor["config"])}
    body = _from_profile(profile, digest)
    if body is not None:
        return {"digest": digest, "profile": profile, "complete": True, "fields": _filled(body),
                "source": f"configs/{profile}.yaml (its digest is the sealed one)"}
    fields = _from_bank_keys(seal)
    return {"digest": digest, "profile": profile, "complete": False, "fields": fields or {},
            "source": "only the fields that fed its banks (bank keys in the seal); the profile file's digest is "
                      "not the sealed one" if fields else "none: the digest alone (no anchor, no matching profile "
                                                          "file, no bank keys)"}


def shown(fields: dict, field: str) -> str:
    return canonical_json(fields[field]).decode() if field in fields else ABSENT


def config_differences(a: dict, b: dict) -> list[dict]:
    """One row per field whose value differs: {"field", "A", "B"} (values as canonical JSON, `(absent)` where a
    complete body lacks the field). Where one side knows only some fields, only those are compared."""
    if a["complete"] == b["complete"]:
        names = set(a["fields"]) | set(b["fields"])
    else:
        names = set((b if a["complete"] else a)["fields"])
    return [{"field": name, "A": shown(a["fields"], name), "B": shown(b["fields"], name)}
            for name in sorted(names) if shown(a["fields"], name) != shown(b["fields"], name)]
