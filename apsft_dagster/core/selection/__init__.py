"""Selection: the six SFT arms from the scored bank (docs/PROTOCOL.md §9).

  arms.py        the arm table: each arm's role, row rule, ranked gain, balance, Stage B sampling
  rules.py       the row rules (`TASK_RULES` per task, `CROSS_TASK_RULES` over other arms' rows) and
                 `select_arms`, the public entry point re-exported here
  assignment.py  the exact minimum-cost assignment the shuffle arm uses
  sft_arms.py    the SFT datasets and their manifest, built from the selected rows

The evidence seal binds every module here (core/seal.py's SEALED_CODE).
"""

from apsft_dagster.core.selection.rules import select_arms

__all__ = ["select_arms"]
