"""Training, merge and deployment probe (docs/PROTOCOL.md §10-12). Public API: `token_weights`,
`weighted_nll` (loss.py); the rest is used by the adapters and merged_models assets.

The loss functions are imported on first use, so reading policy keys (partitions) does not
import torch.
"""

__all__ = ["chunked_nll", "token_weights", "weighted_nll"]


def __getattr__(name: str):
    if name in __all__:
        from apsft_dagster.core.training import loss

        return getattr(loss, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
