"""Names that become partition keys and store folders: checked before anything is written."""

from __future__ import annotations

import re

from apsft_dagster.core.errors import ApsftError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_name(name: str, what: str, error: type[ApsftError] = ApsftError) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name) or ".." in name:
        raise error(f"{what} name {name!r}: use 1-64 letters, digits, '.', '_' or '-' (no '..'), starting with a "
                    "letter or digit; it names a partition and a store folder")
    return name
