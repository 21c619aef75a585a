"""Training, merge and deployment probe (docs/PROTOCOL.md §10-12).

Start reading at `policy.py`: it is the recipe of one policy's training (records, LoRA, the loop,
the checkpoint, the curve), one call per step. The loss is `loss.py` (`record_loss` ->
`chunked_nll`), the loop `loop.py`, the snapshot merge `merge.py`, the probe `probe.py`.

Public API: `token_weights` and `weighted_nll` (loss.py; `token_weights` is the tests' reference
for the weights `records.py` trains with), `merge_snapshot` (merge.py). They are imported on
first use, so reading policy keys does not import torch.
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
