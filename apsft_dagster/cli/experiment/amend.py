"""`apsft amend TEXT`: record a dated amendment or deviation (classified from the evidence)."""

from __future__ import annotations

import argparse

from apsft_dagster.cli.args import profile_arguments, profile_store


def add_parser(sub) -> None:
    p = sub.add_parser("amend", help="record a dated amendment or deviation (classified automatically)")
    profile_arguments(p)
    p.add_argument("text", help="what changes and why")
    p.add_argument("--date", help="YYYY-MM-DD (default: today, UTC)")
    p.add_argument("--budget-device-hours", type=float, metavar="H",
                   help="the training budget this amendment sets (see the budget gate)")
    p.add_argument("--covers", metavar="FIELD[,FIELD]",
                   help="settings the bank's shards were made under with another value than this config's, which "
                        "this amendment accepts (only fields that decide no byte of a shard; core/bank_keys.py)")
    p.set_defaults(handler=amend)


def amend(args: argparse.Namespace) -> int:
    """Record an amendment; its class follows from the evidence already in the store."""
    from apsft_dagster.core.amendments import record_amendment
    from apsft_dagster.core.anchor import design_now, forbidden_changes
    from apsft_dagster.core.bank_key_check import covers
    from apsft_dagster.core.errors import AmendmentError

    config, store = profile_store(args)
    if forbidden := forbidden_changes(store, config):
        raise AmendmentError("the design anchor froze these fields, and this config changes them; an amendment "
                             "cannot cover that, nothing was recorded:\n  " + "\n  ".join(forbidden)
                             + "\nSet them back to their frozen values, or start a new study on a new store (--store)")
    covered = covers(store, config, [f for f in (args.covers or "").split(",") if f]) if args.covers else None
    record = record_amendment(store, args.text, args.date, budget_device_hours=args.budget_device_hours,
                              covers=covered, design=design_now(store, config))
    print(f"amendment {record['seq']} ({record['date']}): {record['classification']}")
    print(f"evidence at recording: {record['evidence']}")
    for field, change in (record.get("covers") or {}).items():
        print(f"covers {field}: {change['from']!r} → {change['to']!r} (shards made under the old value are kept)")
    if "budget_device_hours" in record:
        print(f"training budget: {record['budget_device_hours']} device-hours" + (
            "" if record["selection"] else " (no sft_manifest yet: the budget gate honours a budget only when it "
                                           "was recorded after the manifest it applies to)"))
    print("reseal (materialize evidence_seal) before selection: the seal binds the amendment log")
    return 0
