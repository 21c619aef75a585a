"""The `selection` section: the potential rule's top-k and band."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from apsft_dagster.core.config.base import NonNegFloat, Strict


class Selection(Strict):
    """Two rows per task is the protocol's rule itself (the best and one more), not a setting."""

    top_k: Annotated[int, Field(ge=2)]  # the potential rule takes the best and one more
    band: NonNegFloat
