"""The one typed config: YAML profiles (`smoke`, `full`), validated on load, with a canonical digest.

Every number of the protocol (docs/PROTOCOL.md) lives here once (each section's model: `sections/<key>.py`, the
sibling systems' optional sections included; `Config` and its checks across sections: `schema.py`).
Profiles are chosen by name (`APSFT_PROFILE`, default `smoke`) or path (`APSFT_CONFIG`). `model.path` stays as written:
the digest binds the configured model identity, never a machine's absolute path, and
`APSFT_MODEL_DIR` relocates a local snapshot without changing the digest (`paths.local_model_dir`).
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import ValidationError

from apsft_dagster.core.config.digest import UNSEALED_SECTIONS
from apsft_dagster.core.config.schema import Config
from apsft_dagster.core.config.sections.rehearsal import bind
from apsft_dagster.core.errors import ConfigError
from apsft_dagster.core.json_input import error_field
from apsft_dagster.core.paths import CONFIG_DIR, local_model_dir

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, 8x faster where PyYAML was built with it


def resolve_config_path(profile: str | None = None, path: str | os.PathLike | None = None) -> Path:
    """A path wins over a profile name; the environment fills in whatever the caller left out."""
    if path is None and profile is None:
        path = os.environ.get("APSFT_CONFIG") or None
    if path is not None:
        return Path(path)
    name = profile or os.environ.get("APSFT_PROFILE") or "smoke"
    candidate = CONFIG_DIR / f"{name}.yaml"
    if not candidate.is_file():
        known = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
        raise ConfigError(f"profile {name!r}: no file {candidate}; known profiles are {known}")
    return candidate


def load_config(profile: str | None = None, path: str | os.PathLike | None = None, *,
                require_snapshot: bool = True) -> Config:
    """Parse and validate a profile. Raises ConfigError naming the file and field; writes nothing.
    `require_snapshot=False` skips only the check that a local model's snapshot is on this machine
    (`apsft plan` prices a run before the snapshot is copied); every other check still runs."""
    source = resolve_config_path(profile, path)
    raw = read_profile(source)
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{source}: invalid config:\n{_describe(exc)}") from None
    if config.model.source == "local" and require_snapshot:
        _require_model_dir(config, source)
    if config.tasks.source is not None or config.tasks.source_sha256 is not None:
        from apsft_dagster.core.task_file.pin import bind_task_file

        bind_task_file(config, source)
    if config.rehearsal is not None:
        _bind_rehearsal(config, source, require_snapshot)
    return config


def _bind_rehearsal(config: Config, source: Path, require_snapshot: bool) -> None:
    """Load the registered profile a rehearsal names (never a rehearsal itself) and bind it."""
    path = profile_file(source, config.rehearsal, "rehearsal")
    if (of := read_profile(path).get("rehearsal")) is not None:
        raise ConfigError(f"{source}: rehearsal: {config.rehearsal!r} is itself a rehearsal (of {of!r}); name the "
                          "registered profile it rehearses")
    bind(config, load_config(path=path, require_snapshot=require_snapshot), source, UNSEALED_SECTIONS)


def read_profile(source: Path, _seen: tuple[Path, ...] = ()) -> dict:
    """A profile's YAML as one mapping. `extends: <profile>` (a name under configs/, or a path
    relative to this file) starts from that profile: mappings merge key by key, anything else
    (a list, a number, null) replaces the inherited value."""
    try:
        raw = yaml.load(source.read_text(), Loader=SAFE_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{source}: cannot read YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: top level must be a mapping of config sections")
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    base = profile_file(source, parent, "extends")
    if base.resolve() in _seen:
        raise ConfigError(f"{source}: extends: {parent!r} extends itself (through {[str(p) for p in _seen]})")
    return _merged(read_profile(base, (*_seen, source.resolve())), raw)


def profile_file(source: Path, name: object, key: str) -> Path:
    """The file `key: name` in `source` points at: a profile name under configs/, or a path relative
    to `source`."""
    if not isinstance(name, str):
        raise ConfigError(f"{source}: {key}: expected a profile name or a path, got {name!r}")
    found = source.parent / name if name.endswith((".yaml", ".yml")) else CONFIG_DIR / f"{name}.yaml"
    if not found.is_file():
        raise ConfigError(f"{source}: {key}: {name!r}: no file {found}")
    return found


def _merged(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        field = error_field(err)
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown key; remove it or check its spelling"
        elif "input" in err and err["type"] not in ("missing", "value_error"):
            message += f" (got {err['input']!r})"
        lines.append(f"  {field}: {message}")
    return "\n".join(lines)


def _require_model_dir(config: Config, source: Path) -> None:
    found = local_model_dir(config.model.path)
    if not (found / "config.json").is_file():
        raise ConfigError(
            f"{source}: model.path: {found} is not a model directory (no config.json). "
            f"Place a local snapshot of {config.model.name} (revision {config.model.revision}) there "
            "or set APSFT_MODEL_DIR; nothing is downloaded at run time."
        )
