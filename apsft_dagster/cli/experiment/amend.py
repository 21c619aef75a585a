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
    p.set_defaults(handler=amend)


def amend(args: argparse.Namespace) -> int:
    """Record an amendment; its class follows from the evidence already in the store."""
    from apsft_dagster.core.amendments import record_amendment

    _, store = profile_store(args)
    record = record_amendment(store, args.text, args.date, budget_device_hours=args.budget_device_hours)
    print(f"amendment {record['seq']} ({record['date']}): {record['classification']}")
    print(f"evidence at recording: {record['evidence']}")
    if "budget_device_hours" in record:
        print(f"training budget: {record['budget_device_hours']} device-hours" + (
            "" if record["selection"] else " (no sft_manifest yet: the budget gate honours a budget only when it "
                                           "was recorded after the manifest it applies to)"))
    print("reseal (materialize evidence_seal) before selection: the seal binds the amendment log")
    return 0
