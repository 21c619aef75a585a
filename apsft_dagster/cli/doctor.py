"""`apsft doctor`: can this machine run the GPU environment, and is the profile's snapshot whole, before
the first GPU-minute. Host checks only without a profile; with one, its disk needs and its snapshot.
Writes nothing; exit 1 on any FAILS (core/doctor/)."""

from __future__ import annotations

import argparse

from apsft_dagster.core.doctor.check import exit_status, report
from apsft_dagster.core.errors import ConfigError


def add_parser(sub) -> None:
    p = sub.add_parser("doctor", help="check the host (NVIDIA driver, GPU, Python, glibc, nvcc, disk) and, with a "
                                      "profile, its model snapshot; exit 1 on any FAILS")
    p.add_argument("--profile", help="configs/<profile>.yaml; without --profile or --config only the host is checked")
    p.add_argument("--config", help="path to a profile YAML (wins over --profile)")
    p.add_argument("--store", help="artifact store root whose disk holds the merged models (default: the profile's)")
    p.add_argument("--hashes", action="store_true",
                   help="also sha256 each LFS file of the snapshot against what `hf download` recorded (minutes)")
    p.set_defaults(handler=doctor_command)


def doctor_command(args: argparse.Namespace) -> int:
    if args.profile or args.config:
        from apsft_dagster.core.config import load_config
        from apsft_dagster.core.doctor.profile_checks import check_profile

        checks = check_profile(load_config(args.profile, args.config, require_snapshot=False), store=args.store,
                               hashes=args.hashes)
    elif args.store or args.hashes:
        raise ConfigError("apsft doctor: --store and --hashes check a profile's store and snapshot: name the profile "
                          "(--profile P or --config FILE)")
    else:
        from apsft_dagster.core.doctor.host import check_host

        checks = check_host()
    print(report(checks), end="")
    return exit_status(checks)
