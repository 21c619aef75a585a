"""`apsft freeze` and the run's check against the design anchor (docs/PROTOCOL.md §8, "Design anchor").

`freeze` writes the anchor (core/anchor.py) once per store, while the design is still prospective: no
score, rollout or outcome evidence yet (the amendment log's own classes, core/amendments.py).
`require_amendment` is what `apsft run` calls first on an anchored store: any change of the config or
the sealed code since the anchor is an amendment, so the run refuses, naming each change, until one is
recorded after the anchor (`apsft amend`, classified by the evidence present, as every amendment is).
"""

from __future__ import annotations

from apsft_dagster.core.amendments import classify, evidence_snapshot, read_log
from apsft_dagster.core.anchor import FORMAT, changes_since_anchor, code_digest, design_now, read_anchor, utc_date
from apsft_dagster.core.config import Config
from apsft_dagster.core.errors import AnchorError
from apsft_dagster.core.layout import DESIGN_ANCHOR
from apsft_dagster.core.seal import SEALED_CODE, code_digests
from apsft_dagster.core.store import Store

PROSPECTIVE = classify({})


def freeze(store: Store, config: Config, rationale: str, date: str | None = None) -> dict:
    """Write the store's design anchor and return it (with `sha256`); AnchorError, nothing written, for an
    empty rationale, a store already frozen, or one whose evidence makes the design no longer prospective."""
    if not rationale.strip():
        raise AnchorError("a design anchor needs a rationale: `apsft freeze --rationale \"why this design, "
                          "decided before the harvest\"`")
    when = utc_date(date)
    if (existing := read_anchor(store)) is not None:
        raise AnchorError(f"{store.path(DESIGN_ANCHOR)}: this store's design was already frozen on {existing['date']} "
                          f"(profile {existing['profile']}, config {existing['config_digest'][:12]}); a store is "
                          "frozen once. Record a change as an amendment (`apsft amend \"...\"`), or freeze a new "
                          "store (--store)")
    evidence = evidence_snapshot(store)
    if (stage := classify(evidence)) != PROSPECTIVE:
        raise AnchorError(f"{store.root}: evidence already exists ({_counted(evidence)}: a {stage} store), so a "
                          "design frozen now would not be prospective. Freeze a new store before its harvest "
                          "(--store), or record the design change as an amendment (`apsft amend \"...\"`), which "
                          "is classified by that evidence")
    code = code_digests()
    doc = {"format": FORMAT, "profile": config.profile, "config_digest": config.sealed_digest,
           "config": config.registered.digest_body, "code_patterns": list(SEALED_CODE), "code": code,
           "code_digest": code_digest(code), "date": when, "rationale": rationale.strip(), "evidence": evidence,
           "amendments": len(read_log(store))}
    digest = store.put_json(DESIGN_ANCHOR, doc)
    store.pin_anchor(digest)  # this Store's later receipts cite it too
    return {**doc, "sha256": digest}


def require_amendment(store: Store, config: Config) -> tuple[list[str], list[dict]]:
    """(the changes since the anchor, the amendments recorded after it) for a run allowed to go on; ([], [])
    without an anchor. AnchorError naming each change and the ways out when something changed and no
    amendment was recorded after the anchor."""
    anchor = read_anchor(store)
    if anchor is None:
        return [], []
    changes = changes_since_anchor(store, config)
    after = [r for r in read_log(store) if r["seq"] > anchor["amendments"]]
    if changes and not any(r.get("design") == design_now(store, config) for r in after):
        raise AnchorError(
            f"{store.path(DESIGN_ANCHOR)}: the design was frozen on {anchor['date']} (profile {anchor['profile']}) "
            f"and has changed since; a change after the anchor is an amendment, and none recorded after it covers "
            "this design (an amendment covers the config and sealed code present when it was recorded):\n  "
            + "\n  ".join(changes[:30]) + "\nNothing was run. Record it (`apsft amend \"what changed and why\"`, "
            "classified by the evidence present), restore the frozen config and code, or use a new store (--store)")
    return changes, after


def _counted(evidence: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(evidence.items()))
