"""Training, merge and deployment probe (docs/PROTOCOL.md §10-12). Public API: `token_weights`,
`weighted_nll`; the rest is used by the adapters and merged_models assets."""

from apsft_dagster.core.training.loss import chunked_nll, token_weights, weighted_nll

__all__ = ["chunked_nll", "token_weights", "weighted_nll"]
