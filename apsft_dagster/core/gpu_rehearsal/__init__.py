"""The GPU rehearsal's parts (scripts/gpu_rehearsal.py assembles them; docs/cpu-gpu.md, "GPU rehearsal").

- `snapshot`: the random-weight Qwen3.5 snapshot it times, at the registered dimensions or tiny ones,
  in a real snapshot's file set (preprocessor configs included: vLLM builds the processor at start).
- `timings`: one function per measured path (scoring, training, merge, Transformers and vLLM
  generation, vLLM prompt log-probs), each through the `full` profile's own code.
- `journal`: the JSON, rewritten whole after every phase with the phase's status (`done`, `failed`
  with its error, `skipped` with why), GPU memory handed back and measured between phases.
"""
