"""Doctor for one profile: the host checks with the disk sized from the profile (the snapshot that is
here, or an estimate; one merged model per policy, in the profile's store), the GPU lines "not needed"
on a CPU profile, and a local model's snapshot (core/doctor/snapshot.py). Runs in the project's venv."""

from __future__ import annotations

from pathlib import Path

from apsft_dagster.core.config import Config
from apsft_dagster.core.doctor.check import FAILS, NOT_NEEDED, OK, Check
from apsft_dagster.core.doctor.disk import ENV_BYTES, SNAPSHOT_BYTES, Need
from apsft_dagster.core.doctor.host import check_host
from apsft_dagster.core.doctor.snapshot import check_snapshot, weight_names
from apsft_dagster.core.object_store import default_mirror
from apsft_dagster.core.paths import PROJECT_ROOT, is_object_url, local_model_dir, store_root
from apsft_dagster.core.policies import replication_policies, stage_a_policies


def snapshot_bytes(folder: Path) -> int | None:
    """What the snapshot's weight files take on disk; None when none is here."""
    names, _ = weight_names(folder)
    sizes = [(folder / name).stat().st_size for name in names if (folder / name).is_file()]
    return sum(sizes) if sizes else None


def profile_needs(config: Config, store: Path | str, root: Path = PROJECT_ROOT) -> list[Need]:
    """The environment (a CUDA profile, where .venv-gpu is not yet made), a local snapshot not yet here,
    and one merged model of the snapshot's size per Stage A policy (required) and per Stage B
    replication (a warning). An embedded model takes megabytes: nothing to count."""
    needs = []
    if config.compute.device == "cuda" and not (root / ".venv-gpu").exists():
        needs.append(Need(".venv-gpu and pip's cache", root, ENV_BYTES))
    if config.model.source != "local":
        return needs
    folder = local_model_dir(config.model.path)
    size = snapshot_bytes(folder)
    if size is None:
        size = SNAPSHOT_BYTES
        needs.append(Need(f"the snapshot of {config.model.name} (estimate: 4B bf16)", folder, size))
    where = default_mirror(store) if is_object_url(store) else Path(store)
    stage_a, replication = len(stage_a_policies(config)), len(replication_policies(config))
    return needs + [Need(f"{stage_a} merged models (Stage A)", where, stage_a * size),
                    Need(f"{replication} more (Stage B's replication)", where, replication * size, False,
                         "if Stage B runs")]


def check_profile(config: Config, *, store: Path | str | None = None, hashes: bool = False) -> list[Check]:
    """Every check for `config`: the host's (GPU lines not needed off CUDA), then the snapshot's."""
    store = store or store_root(config.profile)
    device = config.compute.device
    checks = check_host(PROJECT_ROOT, needs=profile_needs(config, store),
                        not_needed="" if device == "cuda" else f"compute.device {device}")
    if config.model.source != "local":
        return checks + [Check(NOT_NEEDED, "snapshot", f"model.source {config.model.source}: the project's own "
                                                       "model, nothing to download")]
    folder = local_model_dir(config.model.path)
    found = check_snapshot(folder, name=config.model.name, revision=config.model.revision, root=PROJECT_ROOT,
                           hashes=hashes)
    return checks + found + ([protocol_check(config, folder)] if (folder / "config.json").is_file() else [])


def protocol_check(config: Config, folder: Path) -> Check:
    """Whether the snapshot's chat template holds the text protocol with the profile's markers
    (core/text_protocol.py), before a stage finds out."""
    from apsft_dagster.core.config import Markers
    from apsft_dagster.core.text_protocol import for_snapshot

    try:
        protocol = for_snapshot(str(folder), config.protocol or Markers())
    except Exception as exc:  # noqa: BLE001 -- a report: a tokenizer that does not load is one more FAILS line
        return Check(FAILS, "text protocol", f"{type(exc).__name__}: {exc}",
                     "fix the snapshot's tokenizer or chat template, or declare the markers it holds in the "
                     "profile's `protocol` section (docs/architectures.md)")
    return Check(OK, "text protocol", f"x ends {protocol.tail[-40:]!r}, boundary {protocol.boundary!r}, end of turn "
                                      f"{protocol.end!r} ({protocol.source})")
