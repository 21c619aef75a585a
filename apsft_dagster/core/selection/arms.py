"""The six SFT arms, once (docs/PROTOCOL.md §9): each arm's name, role, how its rows are chosen,
and whether it is held to the per-cell balance. Selection, the SFT manifest, the analysis, Stage B,
the report and the SQL audits (the `arms` view) read this table; the evidence seal binds it.

Roles: `potential`, the two treatments (a trigger of Stage B); `baseline`, the controls the
strongest baseline is chosen among (ties: first in this order); `shuffle`, the potential arm's
rows moved to other tasks (a potential arm must beat it).

How rows are chosen (`rows`, the rule's name in core/selection/rules.py): `potential` (the best trace by
`score` and one near-best diverse one, else the fallback second), `random` (two random traces,
matched in length to `matched_to`'s rows), `success` (R1-successful traces, as many rows in all as
`matched_to`), `shortest` (the two shortest traces), `shuffle` (`matched_to`'s rows reassigned
across tasks by length).

To add an arm: a row here (with a rule, or a new rule in core/selection/rules.py), the protocol's §9,
and any knob it needs in the config; its policies, partitions, SFT file, evaluation and report
rows follow from this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["potential", "baseline", "shuffle"]
Rule = Literal["potential", "random", "success", "shortest", "shuffle"]


@dataclass(frozen=True)
class ArmSpec:
    name: str
    role: Role
    rows: Rule
    score: str | None = None  # potential: the gain ranked (answer_gain or joint_gain)
    matched_to: str | None = None  # random, success, shuffle: the arm whose rows it is matched to
    balanced: bool = True  # two rows per retained task in every cell; False: the same total only
    sampled_in_stage_b: bool = False  # Stage B samples it k times whichever arm wins


ARM_TABLE = (
    ArmSpec("answer_potential", "potential", "potential", score="answer_gain"),
    ArmSpec("joint_potential", "potential", "potential", score="joint_gain"),
    ArmSpec("random_natural", "baseline", "random", matched_to="answer_potential"),
    # its support is whatever R1 found successful: balanced in total, not per cell
    ArmSpec("success_rft", "baseline", "success", matched_to="answer_potential", balanced=False),
    ArmSpec("shortest_natural", "baseline", "shortest", sampled_in_stage_b=True),
    ArmSpec("potential_shuffle", "shuffle", "shuffle", matched_to="answer_potential", sampled_in_stage_b=True),
)
ARMS = tuple(a.name for a in ARM_TABLE)
ARM = {a.name: a for a in ARM_TABLE}


def arms_with(*, role: Role | None = None, rows: Rule | None = None, score: str | None = None,
              balanced: bool | None = None) -> tuple[str, ...]:
    """The arms (in table order) with the given role, row rule, ranked gain and balance."""
    return tuple(a.name for a in ARM_TABLE if (role is None or a.role == role) and (rows is None or a.rows == rows)
                 and (score is None or a.score == score) and (balanced is None or a.balanced == balanced))


def the_arm(**which) -> str:
    """The one arm `arms_with(**which)` names (e.g. the shortest arm, the shuffle control, the joint arm)."""
    found = arms_with(**which)
    if len(found) != 1:
        raise ValueError(f"arm table: {which} names {list(found)}, expected exactly one arm")
    return found[0]
