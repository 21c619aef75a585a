"""Tiny snapshots of other model families (Llama, Qwen3, Gemma 3, Mistral, Qwen3-MoE), each with its family's
chat-template style, built here so that a profile pointing `model.path` at one runs the study on it: the
proof that nothing in the experiment depends on Qwen3.5's architecture or ChatML (docs/architectures.md)."""
