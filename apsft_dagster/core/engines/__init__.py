"""Generation engines behind one interface: Transformers (CPU/GPU) and vLLM (GPU, lazy import)."""

from apsft_dagster.core.engines.base import Completion, GenerationEngine, GenerationRequest, cut_at_stop

__all__ = ["Completion", "GenerationEngine", "GenerationRequest", "cut_at_stop"]
