"""The verdict names, once (docs/PROTOCOL.md §14-15): Stage A's two, and the final ladder's."""

STAGE_B = "STAGE_B"  # Stage A: a potential arm triggered Stage B
NEGATIVE = "CORE_BANKING_NEGATIVE"  # Stage A's other verdict, and the final one when Stage B's first rung fails
POSITIVE = "POTENTIAL_BANKING_POSITIVE"  # the Stage B comparison holds
REPLICATED = "REPLICATED_BANKING_POSITIVE"  # and it replicated at the replication seed
MISSION = "MISSION_POSITIVE"  # and the treatment beats base sample-more at matched forward tokens
SHORTEST_LEADS = "SHORTEST_BANKING_LEADS"  # reported beside Stage A's verdict, never a verdict itself
