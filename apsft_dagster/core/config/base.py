"""What every section shares: `Strict`, the sections' base model, and the field domains they are declared with.

Every number of the protocol (docs/PROTOCOL.md) lives in a profile, read into the sections' models once.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# Each field's domain (docs/PROTOCOL.md, "Every value's domain"): a value outside it is refused on
# load, naming the field, the value and the range.
PosInt = Annotated[int, Field(ge=1)]  # a count of at least one
NonNegInt = Annotated[int, Field(ge=0)]  # a count or seed that may be zero
PosFloat = Annotated[float, Field(gt=0)]  # a rate, threshold or budget above zero
NonNegFloat = Annotated[float, Field(ge=0)]
Unit = Annotated[float, Field(gt=0, lt=1)]  # a confidence: strictly inside (0, 1)
Share = Annotated[float, Field(ge=0, le=1)]  # a share or rate loss in [0, 1]


class Strict(BaseModel):
    """Every section: unknown keys refused, no type coercion, no infinite or NaN number, frozen once loaded."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)
