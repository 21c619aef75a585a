"""One line of our own for transformers' reference-kernel fallbacks, instead of four of theirs.

Qwen3.5's Gated DeltaNet (linear-attention) layers call kernels from flash-linear-attention and
causal-conv1d when installed, and transformers warns once per kernel when they are not
(`[transformers] `causal_conv1d_fn` is falling back to its reference PyTorch implementation ...
install `causal_conv1d``): four lines a model-holding process, advice no CPU user can act on, since
both are CUDA packages. `quiet_kernel_fallbacks()` (on package import) drops those records and
prints `NOTICE` once per process instead. The kernels run the same; only the words change. On CUDA
the fallback is refused (core/kernels.py) unless the profile chose it, and then `say_instead` words it.
"""

from __future__ import annotations

import logging
import sys

LOGGER = "transformers.integrations.hub_kernels"  # transformers' logger of the fallback warning
FALLBACK = "is falling back to its reference PyTorch implementation"
NOTICE = ("apsft: Qwen3.5's linear-attention layers run transformers' reference PyTorch kernels here "
          "(flash-linear-attention and causal-conv1d are CUDA packages: `bash scripts/setup.sh gpu` installs "
          "them on a GPU machine); correct, slower")


class _OneNotice(logging.Filter):
    def __init__(self):
        super().__init__()
        self.said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if FALLBACK not in record.getMessage():
            return True
        if not self.said:
            self.said = True
            print(NOTICE, file=sys.stderr, flush=True)
        return False


def quiet_kernel_fallbacks() -> None:
    """Install the filter on transformers' logger (stdlib logging: transformers need not be imported)."""
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(f, _OneNotice) for f in logger.filters):
        logger.addFilter(_OneNotice())


def say_instead(line: str) -> None:
    """Print `line` in place of NOTICE, once a process, the fallback records still dropped: a CUDA run
    that chose the reference kernels (core/kernels.py) hears it in those words, not in NOTICE's, which
    speak to a CPU."""
    logger = logging.getLogger(LOGGER)
    quiet_kernel_fallbacks()
    notice = next(f for f in logger.filters if isinstance(f, _OneNotice))
    if not notice.said:
        notice.said = True
        print(line, file=sys.stderr, flush=True)
