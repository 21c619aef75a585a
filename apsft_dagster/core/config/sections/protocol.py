"""The `protocol` section: a local snapshot's text markers (core/text_protocol.py); absent: Qwen's."""

from __future__ import annotations

from apsft_dagster.core.config.base import Strict
from apsft_dagster.core.protocol import BOUNDARY, THINK_CLOSE, THINK_OPEN


class Markers(Strict):
    """The text protocol's markers (core/text_protocol.py): the thought's open and close, the answer marker after
    the close, and the end of turn (None: what the snapshot's chat template writes after the assistant's content).
    Each of think_open, think_close and end must be one token of the snapshot's tokenizer."""

    think_open: str = THINK_OPEN
    think_close: str = THINK_CLOSE
    answer_marker: str = BOUNDARY.removeprefix(THINK_CLOSE)  # must hold a non-blank tag the parser finds
    end: str | None = None
