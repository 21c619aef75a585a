"""`apsft export-arms --format messages|datasets --out DIR`: the six SFT arms as other trainers read them."""

from __future__ import annotations

import argparse

from apsft_dagster.cli.args import profile_arguments, profile_store


def add_parser(sub) -> None:
    p = sub.add_parser("export-arms", help="export the sealed SFT arms as chat messages JSONL or a Hugging Face "
                                           "datasets folder, with per-token loss weights (docs/export-arms.md)")
    profile_arguments(p)
    p.add_argument("--format", required=True, metavar="messages|datasets",
                   help="messages: <arm>.jsonl per arm; datasets: one Hugging Face datasets folder, a config per arm")
    p.add_argument("--out", required=True, help="folder to create (absent or empty)")
    p.set_defaults(handler=export_arms)


def export_arms(args: argparse.Namespace) -> int:
    """Export every arm, or refuse (nothing written), and print what was written."""
    from apsft_dagster.core.arm_export import export_arms as export

    config, store = profile_store(args)
    document = export(store, config, args.format, args.out)
    for arm, entry in document["arms"].items():
        print(f"{arm}: {entry['rows']} rows")
    print(f"exported {len(document['arms'])} arms as {args.format} to {args.out} (seal "
          f"{document['evidence_seal_sha256'][:12]}, config {document['config_digest'][:12]})")
    return 0
