"""The `tasks` section: one block (`Split`) per configured split of the split table, or a task file.

A split's families and levels are the builders' (core/tasks/): `CatalogNames` checks them against the registry at the
first validation, a function-level import, so loading the config loads no builder; the choices and the error are
what a `Literal` of the registry's names gives (core/domains.py reads the choices for the protocol's table).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError, create_model, field_validator, model_validator
from pydantic_core import PydanticCustomError, core_schema

from apsft_dagster.core.config.base import PosInt, Strict
from apsft_dagster.core.splits import CONFIGURED
from apsft_dagster.core.task_file.names import FILE_FAMILIES, FILE_LEVELS, split_members, with_source


def known_families() -> tuple[str, ...]:
    from apsft_dagster.core.tasks import BUILDERS

    return tuple(BUILDERS)  # the family registry (core/tasks/__init__.py), in its order


def known_levels() -> tuple[int, ...]:
    from apsft_dagster.core.tasks import STEPS_BY_LEVEL

    return tuple(STEPS_BY_LEVEL)  # the levels the builders know (core/tasks/base.py)


class CatalogNames:
    """A field's metadata: one of the builders' names (`known`), validated as `Literal[known()]` would be."""

    def __init__(self, known) -> None:
        self.known, self._adapter = known, None

    def choices(self) -> tuple:
        return self.known()

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(self._validate)

    def _validate(self, value: Any) -> Any:
        if self._adapter is None:
            self._adapter = TypeAdapter(Literal[self.choices()])
        try:
            return self._adapter.validate_python(value, strict=True)
        except ValidationError as exc:
            error = exc.errors()[0]
            raise PydanticCustomError(error["type"], error["msg"], error.get("ctx")) from None


FAMILIES = CatalogNames(known_families)
LEVELS = CatalogNames(known_levels)


class Split(Strict):
    """A block of tasks: every (family, level) cell holds `per_cell` tasks; `total` is declared."""

    families: Annotated[list[Annotated[str, FAMILIES]], Field(min_length=1), FILE_FAMILIES]  # the catalog's families
    levels: Annotated[list[Annotated[int, LEVELS]], Field(min_length=1), FILE_LEVELS]  # with tasks.source: a file's
    per_cell: PosInt
    total: PosInt
    _names = field_validator("families", "levels", mode="wrap")(split_members)  # core/task_file/names.py


# One block per configured split of the split table (train, core_iid, core_hard, held_family; a
# derived split such as rendering has none), so a new split is a row there and a block here.
# tasks.source: a JSONL or Parquet task file (relative to the profile, or absolute) pinned by tasks.source_sha256
# (docs/task-files.md; both or neither: core/task_file/pin.py); absent, the builders' tasks (core/tasks/)
Tasks = create_model("Tasks", __base__=Strict, __module__=__name__, **{name: (Split, ...) for name in CONFIGURED},
                     source=(str | None, None), source_sha256=(str | None, None),
                     __validators__={"_source": model_validator(mode="wrap")(with_source)})
