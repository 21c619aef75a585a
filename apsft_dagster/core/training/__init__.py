"""Training, merge and deployment probe (docs/PROTOCOL.md §10-12). Public API: `token_weights`,
`weighted_nll` (loss.py), `merge_snapshot` (merge.py); the rest is used by the adapters and
merged_models assets.

They are imported on first use, so reading policy keys (partitions) does not import torch.
"""

__all__ = ["chunked_nll", "merge_snapshot", "token_weights", "weighted_nll"]


def __getattr__(name: str):
    if name == "merge_snapshot":
        from apsft_dagster.core.training.merge import merge_snapshot

        return merge_snapshot
    if name in __all__:
        from apsft_dagster.core.training import loss

        return getattr(loss, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
