"""What every `apsft` command shares: the profile arguments, handing the choice to the definitions,
and the profile's store."""

from __future__ import annotations

import argparse
import os

from apsft_dagster.core.config import Config, load_config
from apsft_dagster.core.paths import is_object_url
from apsft_dagster.profile import Choice, environment_choice


def profile_arguments(p: argparse.ArgumentParser, store: bool = True) -> None:
    p.add_argument("--profile", help="configs/<profile>.yaml (default: $APSFT_PROFILE or smoke)")
    p.add_argument("--config", help="path to a profile YAML (wins over --profile)")
    if store:
        p.add_argument("--store", help="artifact store root (default: .apsft/store/<profile>)")


def choice(args: argparse.Namespace) -> Choice:
    """The profile, profile file and store the arguments name, as values for `definitions_for`; what they
    leave out is the environment's (a `--profile` drops `APSFT_CONFIG`, as `export_choice` does)."""
    given = environment_choice()
    store = getattr(args, "store", None)
    return Choice(args.profile or given.profile,
                  os.path.abspath(args.config) if args.config else None if args.profile else given.config_path,
                  (store if is_object_url(store) else os.path.abspath(store)) if store else given.store_dir)


def export_choice(args: argparse.Namespace) -> Choice:
    """Hand the choice to the definitions of this process and its children (the experiment's partitions are
    derived from the environment's config at load; `apsft ui` loads the definitions in a subprocess), and
    return it (`choice`)."""
    chosen = choice(args)
    if args.config:
        os.environ["APSFT_CONFIG"] = str(os.path.abspath(args.config))
    elif args.profile:
        os.environ["APSFT_PROFILE"] = args.profile
        os.environ.pop("APSFT_CONFIG", None)
    if getattr(args, "store", None):
        os.environ["APSFT_STORE_DIR"] = args.store if is_object_url(args.store) else os.path.abspath(args.store)
    return chosen


def profile_store(args: argparse.Namespace):
    """(config, store) of the profile the arguments name."""
    from apsft_dagster.core.object_store import open_store
    from apsft_dagster.core.paths import store_root

    config: Config = load_config(args.profile, args.config)
    return config, open_store(args.store or store_root(config.profile))


def store_location(chosen: Choice, config: Config) -> str:
    """The store the choice names: its `store_dir`, else the profile's own (`<state>/store/<profile>`)."""
    from apsft_dagster.core.paths import profile_store

    return chosen.store_dir or str(profile_store(config.profile))
