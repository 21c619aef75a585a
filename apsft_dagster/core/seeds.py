"""Seeds derived from config and identities only (never from process state)."""

from __future__ import annotations

import hashlib


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from SHA-256 of the parts, e.g. (experiment seed, task id, batch)."""
    key = "|".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") >> 1
