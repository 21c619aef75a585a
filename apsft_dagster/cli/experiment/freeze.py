"""`apsft freeze --rationale TEXT`: record the design anchor before the harvest (core/freeze.py)."""

from __future__ import annotations

import argparse

from apsft_dagster.cli.args import profile_arguments, profile_store


def add_parser(sub) -> None:
    p = sub.add_parser("freeze", help="record the design anchor (config, sealed code, date, rationale) before the "
                                      "harvest")
    profile_arguments(p)
    p.add_argument("--rationale", required=True, metavar="TEXT", help="why this design, decided before the harvest")
    p.set_defaults(handler=freeze)


def freeze(args: argparse.Namespace) -> int:
    """Write the store's design anchor; refused (nothing written) once frozen or once scores exist."""
    from apsft_dagster.core.freeze import freeze as freeze_design
    from apsft_dagster.core.layout import DESIGN_ANCHOR

    config, store = profile_store(args)
    anchor = freeze_design(store, config, args.rationale)
    print(f"design anchor {anchor['sha256'][:12]} ({anchor['date']}): profile {anchor['profile']}, config "
          f"{anchor['config_digest'][:12]}, sealed code {len(anchor['code'])} files ({anchor['code_digest'][:12]})")
    print(f"  {store.path(DESIGN_ANCHOR)}: every receipt written from now on cites it; `apsft run` refuses a change "
          "of the config or the sealed code until `apsft amend` records it")
    return 0
