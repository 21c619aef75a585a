"""The task splits, once (docs/PROTOCOL.md §3): each split's name, where it is evaluated, whether
the primary comparison reads it, which families it may hold, and how it is derived.

`evaluated`: `stage_a` splits are evaluated in Stage A and again in Stage B; `stage_b` ones only
in Stage B; `train` is never evaluated. `primary`: the primary comparison reads it (Stage A:
its primary split, core IID; Stage B: core IID and `rendering`). `families`: `train` means
exactly the train split's families, `held_out` none of them. `derived_from`: the split's tasks
are another split's (same cells, seeds and answers) under the second prompt template.

The catalog, the config's checks, the evaluations, the analysis, Stage B and the report read
this table. To add a split: a row here, its block under `tasks:` in each profile (a field of
`config_sections.Tasks` unless it is derived), and the protocol's §3; a test adds one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class SplitSpec:
    name: str
    evaluated: Literal["train", "stage_a", "stage_b"]
    primary: bool = False
    families: Literal["train", "held_out"] | None = None
    derived_from: str | None = None


SPLIT_TABLE = (
    SplitSpec("train", "train"),
    SplitSpec("core_iid", "stage_a", primary=True, families="train"),
    SplitSpec("core_hard", "stage_a", families="train"),
    SplitSpec("held_family", "stage_a", families="held_out"),
    SplitSpec("rendering", "stage_b", primary=True, derived_from="core_iid"),
)
SPLIT = {s.name: s for s in SPLIT_TABLE}
CONFIGURED = tuple(s.name for s in SPLIT_TABLE if s.derived_from is None)  # a `tasks:` block each
STAGE_A_SPLITS = tuple(s.name for s in SPLIT_TABLE if s.evaluated == "stage_a")
STAGE_B_SPLITS = tuple(s.name for s in SPLIT_TABLE if s.evaluated in ("stage_a", "stage_b"))
PRIMARY = next(s.name for s in SPLIT_TABLE if s.primary and s.evaluated == "stage_a")  # Stage A's: core_iid
STAGE_B_PRIMARY = tuple(s.name for s in SPLIT_TABLE if s.primary)  # core_iid and rendering
SECONDARY = tuple(s for s in STAGE_A_SPLITS if s != PRIMARY)  # reported beside it: core_hard, held_family
