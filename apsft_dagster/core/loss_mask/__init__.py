"""Loss-mask rules for agentic SFT traces: which assistant turns to exclude from the loss."""

from apsft_dagster.core.loss_mask.rules import (
    DEFAULT_PROSE_COMMANDS,
    FALSE_CLAIM,
    FALSE_CLAIM_WITH_COMMAND,
    PROSE_COMMAND,
    PROSE_ONLY,
    STALL,
    TERMINUS_JSON,
    TOOLCALL_SYNTAX,
    LossMaskError,
    flag_row,
    left_alone,
)

__all__ = [
    "DEFAULT_PROSE_COMMANDS",
    "FALSE_CLAIM",
    "FALSE_CLAIM_WITH_COMMAND",
    "PROSE_COMMAND",
    "PROSE_ONLY",
    "STALL",
    "TERMINUS_JSON",
    "TOOLCALL_SYNTAX",
    "LossMaskError",
    "flag_row",
    "left_alone",
]
