"""What the config's digest binds: the canonical JSON of the sealed sections, late fields at their default left out.

`Config.digest` (core/config/schema.py) is the config's identity in the evidence seal and every receipt.
"""

from __future__ import annotations

import hashlib
import json

# other systems of the platform: their settings never move the experiment's seal
SIBLING_SECTIONS = ("loss_mask", "run_report")
# Left out of the digest that binds every receipt: settings that change no artifact (the siblings', `plan`'s envelopes
# of `apsft plan`, `gpu`'s kernel choice), so setting them on the machine that runs the protocol voids no receipt.
UNSEALED_SECTIONS = (*SIBLING_SECTIONS, "plan", "gpu", "review", "ray")  # review: when `apsft run` pauses; ray: where

# Sealed fields added after receipts existed, each with its default: the digest leaves one out while it holds
# that default, so a profile that does not set it keeps its digest and every receipt (`late_defaults_dropped`).
LATE_FIELDS: dict[str, object] = {"scoring.on_failed_gate": "reference",
                                   "scoring.reference_batch_tokens": 8192,
                                   "protocol": None,  # a local snapshot's markers (Markers); absent: Qwen's
                                   "tasks.source": None, "tasks.source_sha256": None}  # a task file (Tasks)


def late_defaults_dropped(body: dict) -> dict:
    """`body` (a config's JSON form) without the LATE_FIELDS that hold their default."""
    for dotted, default in LATE_FIELDS.items():
        *parents, leaf = dotted.split(".")
        node = body
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node and node[leaf] == default:
            del node[leaf]
    return body


def body_digest(body: dict) -> str:
    """The digest of a config body (`Config.digest_body`, or one a store kept): SHA-256 of its canonical JSON."""
    return hashlib.sha256(canonical_json(body)).hexdigest()


def canonical_json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
