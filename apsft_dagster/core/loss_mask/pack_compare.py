"""The comparison of a masked build's packing with its unmasked base's, from the two reports and the two
dropped-row streams (pack_write.py `dropped.jsonl`, input order), merged by input position in constant memory."""

from __future__ import annotations

from collections.abc import Iterable

from apsft_dagster.core.loss_mask.pack_encode import NO_TRAINABLE, OVER_LIMIT

COMPARED = ("rows_in", "rows_packed", "packs", "tokens", "efficiency", "rows_over_limit", "rows_no_trainable")
SAME_INPUT = ("rows_in", "pack_length", "shards", "seed", "window", "chat_template_sha256",
              "tokenizer_sha256")  # a comparison needs these equal (absent in both: equal)
SHOWN = 5  # row ids named per problem


class _Ids:
    """A count and the first SHOWN row ids."""

    def __init__(self):
        self.count, self.first = 0, []

    def add(self, rid: str) -> None:
        self.count += 1
        if len(self.first) < SHOWN:
            self.first.append(rid)


def _merge(base: Iterable[dict], masked: Iterable[dict]) -> dict:
    """Walk both drop lists by input position: what each problem needs, counted."""
    out = {k: _Ids() for k in ("over_differs", "regained", "wrong_reason", "lost", "other_row")}
    lost_tokens, b_it, m_it = 0, iter(base), iter(masked)
    b, m = next(b_it, None), next(m_it, None)
    while b is not None or m is not None:
        if m is None or (b is not None and b["row"] < m["row"]):  # dropped in base only
            out["regained"].add(b["row_id"])
            if b["reason"] == OVER_LIMIT:
                out["over_differs"].add(b["row_id"])
            b = next(b_it, None)
        elif b is None or m["row"] < b["row"]:  # dropped in masked only
            out["lost"].add(m["row_id"])
            lost_tokens += m["tokens"]
            if m["reason"] != NO_TRAINABLE:
                out["wrong_reason"].add(m["row_id"])
            if m["reason"] == OVER_LIMIT:
                out["over_differs"].add(m["row_id"])
            m = next(m_it, None)
        else:  # dropped in both
            if b["row_id"] != m["row_id"]:
                out["other_row"].add(f"{b['row_id']}/{m['row_id']}")
            if (b["reason"] == OVER_LIMIT) != (m["reason"] == OVER_LIMIT):
                out["over_differs"].add(b["row_id"])
            b, m = next(b_it, None), next(m_it, None)
    return {**out, "lost_tokens": lost_tokens}


def _drop_problems(base: dict, masked: dict, merged: dict) -> list[str]:
    """Every row the masked build packs less must be one it dropped for having nothing to train."""
    problems = []
    if (over := merged["over_differs"]).count:
        problems.append(f"rows_over_limit: base drops {base['rows_over_limit']} rows over the limit, masked "
                        f"{masked['rows_over_limit']}; {over.count} rows differ: {over.first}")
    if (other := merged["other_row"]).count:
        problems.append(f"rows at the same input position have other row ids in base and masked: {other.first}")
    if (regained := merged["regained"]).count:
        problems.append(f"rows dropped in base but packed in masked: {regained.first}")
    if (wrong := merged["wrong_reason"]).count:
        problems.append(f"rows packed in base but dropped in masked for another reason than {NO_TRAINABLE}: "
                        f"{wrong.first}")
    lost = merged["lost"].count
    if base["rows_packed"] - masked["rows_packed"] != lost:
        problems.append(f"rows_packed: base - masked = {base['rows_packed'] - masked['rows_packed']} but "
                        f"{lost} rows are dropped only in masked")
    if base["tokens"] - masked["tokens"] != merged["lost_tokens"]:
        problems.append(f"tokens: base - masked = {base['tokens'] - masked['tokens']} but the rows dropped only in "
                        f"masked hold {merged['lost_tokens']} tokens")
    return problems


def pack_comparison(base: dict, masked: dict, base_dropped: Iterable[dict], masked_dropped: Iterable[dict]) -> dict:
    """The table base vs masked with deltas (masked - base), and whether every difference is accounted for
    by rows the masked build dropped because every assistant turn in them is masked."""
    table = [{"metric": k, "base": base[k], "masked": masked[k], "delta": masked[k] - base[k]} for k in COMPARED]
    problems = [f"{k}: base {base.get(k)!r} but masked {masked.get(k)!r}; pack the same rows the same way"
                for k in SAME_INPUT if base.get(k) != masked.get(k)]
    problems += _drop_problems(base, masked, _merge(base_dropped, masked_dropped))
    if masked["trainable_tokens"] > base["trainable_tokens"]:
        problems.append(f"trainable_tokens: masked {masked['trainable_tokens']} exceeds base "
                        f"{base['trainable_tokens']}; masking can only remove loss")
    return {"table": table, "accounted": not problems, "problems": problems}
