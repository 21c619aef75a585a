"""What every `apsft` command shares: the profile arguments, handing the choice to the definitions,
and the profile's store."""

from __future__ import annotations

import argparse
import os

from apsft_dagster.core.config import Config, load_config
from apsft_dagster.core.paths import is_object_url


def profile_arguments(p: argparse.ArgumentParser, store: bool = True) -> None:
    p.add_argument("--profile", help="configs/<profile>.yaml (default: $APSFT_PROFILE or smoke)")
    p.add_argument("--config", help="path to a profile YAML (wins over --profile)")
    if store:
        p.add_argument("--store", help="artifact store root (default: .apsft/store/<profile>)")


def export_choice(args: argparse.Namespace) -> None:
    """Hand the choice to the definitions (partitions are derived from the config at load)."""
    if args.config:
        os.environ["APSFT_CONFIG"] = str(os.path.abspath(args.config))
    elif args.profile:
        os.environ["APSFT_PROFILE"] = args.profile
        os.environ.pop("APSFT_CONFIG", None)
    if getattr(args, "store", None):
        os.environ["APSFT_STORE_DIR"] = args.store if is_object_url(args.store) else os.path.abspath(args.store)


def profile_store(args: argparse.Namespace):
    """(config, store) of the profile the arguments name."""
    from apsft_dagster.core.object_store import open_store
    from apsft_dagster.core.paths import store_root

    config: Config = load_config(args.profile, args.config)
    return config, open_store(args.store or store_root(config.profile))

