"""Seeds derived from config and identities only (never from process state): the one rule.

A seed is the first 8 bytes of SHA-256 over the parts joined by "|"; `derive_seed` drops one
bit so it fits a signed 64-bit column (Parquet, torch).
"""

from __future__ import annotations

import hashlib


def seed64(*parts: object) -> int:
    """The 64-bit seed of the parts, e.g. ("apsft-task", family, level, index, seed)."""
    key = "|".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from the parts, e.g. (experiment seed, task id, batch)."""
    return seed64(*parts) >> 1
